"""Thought World consensus: the pure rules (`rules`: a proposal's state from its records;
`stakes`, `gaming`, `values` for the classifier, the anti-gaming checks and the value
weights they use), what a proposal renders into (`view`), and where proposals live
(`store`: the threads of `shared/proposals/records/<id>/`, through `shared.threads`),
with the world repository the executor acts in (`world`), the episodes learned from
(`episodes`), the patterns the integrators name (`patterns`), a task's chain of proposals
(`tasks`, pure) and its workspace (`workspace`), the value arithmetic (`weighing`: weights,
requests to change one's own, experimental rounds), and the emergence indicators read
from them all (`emergence`, with the Quality Rubric in `rubric` and the meta-reference
lexicon in `metacognition`)."""

from shared.consensus import rules
from shared.consensus.rules import *  # noqa: F403 - the rules' names are the package's
from shared.consensus.store import Consensus
from shared.consensus.view import episode_record, render

__all__ = [*rules.__all__, "Consensus", "episode_record", "render"]  # noqa: PLE0604
