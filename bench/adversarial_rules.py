"""The consensus and debate state machines, run long: 10,000+ steps each (issue 19).

    .venv/bin/python bench/adversarial_rules.py                 # 10,000 steps per machine
    .venv/bin/python bench/adversarial_rules.py --steps 50000 --only rules

The test suite runs each machine for a bounded sample (tests/test_consensus_rules.py,
tests/test_consensus_integrity.py, tests/test_debate_integrity.py); this runs the same
machines - adversarial citizens gaming every rule, the oracle written in the tests -
in batches of fresh examples until each has taken `--steps` steps, and prints steps,
examples, seconds and violations. A violation is hypothesis's shrunk counterexample,
printed in full; the exit status is 1 if any machine found one. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, run_state_machine_as_test

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' machines and oracles, as in every bench here

from tests.test_consensus_integrity import ConsensusMachine  # noqa: E402
from tests.test_consensus_rules import RulesMachine  # noqa: E402
from tests.test_debate_integrity import DebateMachine, DebateStoreMachine  # noqa: E402

MACHINES: dict[str, tuple[type[RuleBasedStateMachine], str, int]] = {
    "rules": (RulesMachine, "consensus rules, pure: a gaming proposer and reviewers", 60),
    "store": (ConsensusMachine, "consensus through the commons: forgers, crashes, gamers", 40),
    "debate": (DebateMachine, "debate rules, pure: adversarial participants", 60),
    "debate-store": (DebateStoreMachine, "debates through the store, with crashes", 40),
}


class Counter:
    steps = 0


def counted(machine: type[RuleBasedStateMachine],
            counter: Counter) -> type[RuleBasedStateMachine]:
    """`machine` counting its steps in `counter` (an invariant runs once per step)."""

    def count(_machine: RuleBasedStateMachine) -> None:
        counter.steps += 1

    return type(machine.__name__, (machine,), {"_count": invariant()(count)})


def run(name: str, target: int) -> tuple[int, int, float, str]:
    machine, _, step_count = MACHINES[name]
    counter = Counter()
    m = counted(machine, counter)
    examples, started, failure = 0, time.monotonic(), ""
    while counter.steps < target and not failure:
        batch = 50
        try:
            run_state_machine_as_test(m, settings=settings(
                max_examples=batch, stateful_step_count=step_count, deadline=None,
                database=None, suppress_health_check=list(HealthCheck)))
        except Exception:  # noqa: BLE001 - a violation: print hypothesis's counterexample
            failure = traceback.format_exc()
        examples += batch
    return counter.steps, examples, time.monotonic() - started, failure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--only", choices=list(MACHINES), action="append")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the forgeries' "ignoring …" warnings are the attack
    print(f"{'machine':<13} {'steps':>7} {'examples':>8} {'seconds':>8} {'steps/s':>8}  "
          "violations  what")
    failed = False
    for name in args.only or list(MACHINES):
        steps, examples, seconds, failure = run(name, args.steps)
        failed |= bool(failure)
        print(f"{name:<13} {steps:>7} {examples:>8} {seconds:>8.1f} {steps / seconds:>8.0f}  "
              f"{'1' if failure else '0':>10}  {MACHINES[name][1]}", flush=True)
        if failure:
            print(failure)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
