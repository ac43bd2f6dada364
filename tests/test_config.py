"""Config: every template loads; each kind of bad file gives a clear error naming the fix."""

from __future__ import annotations

import importlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from citizen import config
from citizen.config import paths
from citizen.errors import ConfigError


@pytest.fixture
def tpl_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of templates/ that a test may break."""
    target = tmp_path / "templates"
    shutil.copytree(paths.project_dir() / "templates", target)
    monkeypatch.setenv("EXPERIENCE_TEMPLATES", str(target))
    return target


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def load_fails(directory: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config.Templates(directory)
    return info.value


def test_every_shipped_template_loads() -> None:
    tpl = config.templates()
    assert tpl.citizen_names() == ["opus", "mira", "aria"]
    for name in tpl.citizen_names():
        cfg = tpl.citizen(name)
        assert set(cfg.context_limits) == set(config.CONTEXT_TYPES)
        assert cfg.seat("primary").role == "primary"
        assert cfg.budget.max_usd_per_wake == 1.0 and cfg.budget.max_iterations == 25
        slots = tpl.wake_slots(name)
        assert sorted(slots) == list(range(10))
        assert {s: slots[s] for s in (0, 1, 4, 7)} == config.MANDATORY_SLOTS
        assert name in tpl.identity(name)
    assert set(tpl.values) == {"executor", "verifier", "integrator"}
    assert tpl.values["verifier"].weights["truth"] == 1.0
    assert "${" not in "".join(tpl.system_prompt("opus", "x", tpl.default_budget()))
    assert "ready" in tpl.prompt("doctor")
    for prompt in ("executor", "verifier", "integrator", "tool_select", "route"):
        assert tpl.prompt(prompt)
    assert "write a test" in tpl.wake_prompt("TASK", task="write a test")


def test_seat_falls_back_to_primary() -> None:
    cfg = config.templates().citizen("mira")
    assert cfg.seat("balanced") == cfg.seat("primary")
    assert cfg.seat("fast").model == "claude-haiku-4-5"


def test_missing_file(tpl_dir: Path) -> None:
    (tpl_dir / "models.json").unlink()
    err = load_fails(tpl_dir)
    assert err.path.name == "models.json" and "missing" in str(err)


def test_invalid_json_says_where(tpl_dir: Path) -> None:
    path = tpl_dir / "citizen_configs.json"
    path.write_text(path.read_text().replace('"opus": {', '"opus": {,', 1))
    err = load_fails(tpl_dir)
    assert "not valid JSON (line" in str(err) and "citizen_configs.json" in str(err)


def test_invalid_yaml(tpl_dir: Path) -> None:
    (tpl_dir / "values.yaml").write_text("base_values: [unclosed\n")
    assert "not valid YAML" in str(load_fails(tpl_dir))


def test_wrong_type_names_the_key(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "citizen_configs.json",
              lambda d: d["citizens"]["mira"]["council"][0].update(temperature=3))
    err = load_fails(tpl_dir)
    assert err.key == "citizens.mira.council[0].temperature"
    assert "greater than the maximum of 2" in err.problem


def test_unknown_key_is_refused(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "citizen_configs.json",
              lambda d: d["citizens"]["aria"].update(budjet={"max_usd_per_wake": 5}))
    err = load_fails(tpl_dir)
    assert err.key == "citizens.aria" and "budjet" in err.problem


def test_newer_schema_version(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "wake_prompts.json", lambda d: d.update(schema_version=2))
    err = load_fails(tpl_dir)
    assert err.key == "schema_version" and "version 2" in err.problem


def test_council_model_without_a_price(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "citizen_configs.json",
              lambda d: d["citizens"]["opus"]["council"][0].update(model="claude-unknown"))
    err = load_fails(tpl_dir)
    assert err.key == "opus.council[0].model" and "models.json" in err.fix


def test_council_without_primary(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "citizen_configs.json", lambda d: d["citizens"]["mira"].update(
        council=[{"model": "claude-haiku-4-5", "role": "fast", "temperature": 0.2}]))
    assert "no seat has role 'primary'" in str(load_fails(tpl_dir))


def test_mandatory_slot_cannot_be_moved(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "wake_allocations.json", lambda d: d["mandatory"].update({"4": "TASK"}))
    assert load_fails(tpl_dir).key == "mandatory"


def test_citizen_slots_must_cover_exactly_the_free_slots(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "wake_allocations.json", lambda d: d["citizens"]["opus"].pop("9"))
    err = load_fails(tpl_dir)
    assert err.key == "citizens.opus" and "[2, 3, 5, 6, 8, 9]" in err.fix


def test_unknown_wake_type(tpl_dir: Path) -> None:
    edit_json(tpl_dir / "wake_allocations.json",
              lambda d: d["citizens"]["aria"].update({"3": "NAP"}))
    err = load_fails(tpl_dir)
    assert err.key == "citizens.aria.3" and "NAP" in err.problem


def test_weight_outside_its_bounds(tpl_dir: Path) -> None:
    path = tpl_dir / "values.yaml"
    data = yaml.safe_load(path.read_text())
    data["agent_roles"]["verifier"]["weights"]["truth"] = 0.5
    path.write_text(yaml.safe_dump(data))
    err = load_fails(tpl_dir)
    assert err.key == "agent_roles.verifier.weights.truth" and "outside its bounds" in err.problem


def test_role_weights_must_cover_every_base_value(tpl_dir: Path) -> None:
    path = tpl_dir / "values.yaml"
    data = yaml.safe_load(path.read_text())
    del data["agent_roles"]["executor"]["weights"]["safety"]
    path.write_text(yaml.safe_dump(data))
    assert load_fails(tpl_dir).key == "agent_roles.executor.weights"


def test_own_config_overrides_template(civ_root: Path) -> None:
    home = civ_root / "mira"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({
        "email": "mira@example.org", "focus": "Systems",
        "budget": {"max_usd_per_wake": 0.25}}))
    cfg = config.load_citizen("mira")
    assert cfg.email == "mira@example.org"
    assert cfg.budget.max_usd_per_wake == 0.25
    assert cfg.budget.max_iterations == 25  # from defaults
    assert cfg.source == home / "config.json"


def test_broken_own_config_names_its_file(civ_root: Path) -> None:
    (civ_root / "opus").mkdir()
    (civ_root / "opus" / "config.json").write_text('{"focus": 7}')
    with pytest.raises(ConfigError) as info:
        config.load_citizen("opus")
    assert info.value.path == civ_root / "opus" / "config.json"
    assert info.value.key == "focus"


def test_unknown_citizen() -> None:
    with pytest.raises(ConfigError, match="known: opus, mira, aria"):
        config.load_citizen("zeno")


@pytest.mark.parametrize("name", ["../etc", "Opus", "a/b", "", "-x", "x" * 40])
def test_names_that_could_escape_the_root_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="not a valid citizen name"):
        paths.citizen_home(name)


def test_env_file_parsing_and_environment_override(civ_root: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    home = civ_root / "opus"
    home.mkdir()
    (home / ".env").write_text(
        "# secrets\nANTHROPIC_API_KEY='sk-file'\nexport EMAIL_USER=opus@x.org\n\n"
        'EMAIL_PASS="p w"\n')
    secrets = config.load_secrets("opus")
    assert secrets.get("ANTHROPIC_API_KEY") == "sk-file"
    assert secrets.get("EMAIL_PASS") == ""  # the broker's alone (it logs in, not the daemon)
    assert secrets.redact("pass: p w") == "pass: p w"  # too short to redact safely
    assert "sk-file" not in repr(secrets)  # never leaks into a log line
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    assert config.load_secrets("opus").get("ANTHROPIC_API_KEY") == "sk-env"


def test_env_file_with_a_bad_line(civ_root: Path) -> None:
    (civ_root / "opus").mkdir()
    (civ_root / "opus" / ".env").write_text("ANTHROPIC_API_KEY=x\nthis is not an assignment\n")
    with pytest.raises(ConfigError) as info:
        config.load_secrets("opus")
    assert info.value.key == "line 2"


def test_every_path_derives_from_civ_root(civ_root: Path) -> None:
    assert paths.shared_dir() == civ_root / "shared"
    assert paths.citizen_home("aria") == civ_root / "aria"
    assert paths.citizen_env_file("aria") == civ_root / "aria" / ".env"


@pytest.mark.parametrize("name", ["debate_move.json", "config/citizen_configs.json"])
def test_a_broken_schema_file_fails_at_load_naming_it(tpl_dir: Path, name: str) -> None:
    """Schemas are data (templates/schemas/): a file that is not JSON, or not a JSON
    Schema, stops the templates from loading - with its path - not a wake later."""
    path = tpl_dir / "schemas" / name
    good = path.read_text()
    path.write_text(good[:-20])
    err = load_fails(tpl_dir)
    assert str(path) in str(err) and "not valid JSON" in str(err)
    edit_json_text = json.loads(good)
    edit_json_text["type"] = "nonsense"
    path.write_text(json.dumps(edit_json_text))
    err = load_fails(tpl_dir)
    assert str(path) in str(err) and "not a JSON Schema" in str(err)


def test_output_schemas_are_filled_from_code(tpl_dir: Path) -> None:
    tpl = config.Templates(tpl_dir)
    schema = tpl.schema("consensus_verify", values=["truth"], decisions=["approve", "reject"],
                        min_step=-0.1, max_step=0.1)
    assert schema["properties"]["decision"] == {"enum": ["approve", "reject"]}
    assert schema["properties"]["values"]["items"] == {"enum": ["truth"]}
    with pytest.raises(ConfigError, match="placeholder 'decisions' is not filled"):
        tpl.schema("consensus_verify", values=["truth"])
    with pytest.raises(ConfigError, match="no such output schema"):
        tpl.schema("nothing_like_it")


def test_the_selection_route_and_bid_schemas_are_data(tpl_dir: Path) -> None:
    """The three output schemas once written inline in code load from templates/schemas/."""
    tpl = config.Templates(tpl_dir)
    picked = tpl.schema("tool_select", tools=["read_file", "write_file"], max_tools=12)
    assert picked["properties"]["tools"] == {"type": "array", "maxItems": 12,
                                             "items": {"enum": ["read_file", "write_file"]}}
    assert tpl.schema("route", tiers=("fast", "primary"))["properties"]["tier"] == {
        "enum": ["fast", "primary"]}
    assert tpl.schema("stream_bid")["required"] == ["claim", "confidence", "reasoning"]


def test_the_rules_come_from_the_rules_dir_not_the_codes_templates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Break 5 of issue 28: a citizen raising its caps and permissions in its own
    ~/code/templates changed the rules its daemon ran by. With the unit's
    EXPERIENCE_RULES_DIR (the release), it changes nothing."""
    code, release = tmp_path / "code-templates", tmp_path / "release-templates"
    shutil.copytree(paths.templates_dir(), code)
    shutil.copytree(paths.templates_dir(), release)
    configs = json.loads((code / "citizen_configs.json").read_text())
    configs["defaults"]["budget"]["max_usd_per_day"] = 10000
    configs["defaults"]["permissions"]["can_use_network"] = True
    (code / "citizen_configs.json").write_text(json.dumps(configs))
    models = json.loads((code / "models.json").read_text())
    for price in models["prices_usd_per_mtok"].values():
        price.update(input=0, output=0, cache_write=0, cache_read=0)
    (code / "models.json").write_text(json.dumps(models))
    monkeypatch.setenv("EXPERIENCE_TEMPLATES", str(code))
    assert config.templates().citizen("opus").budget.max_usd_per_day == 10000  # no rules dir
    monkeypatch.setenv("EXPERIENCE_RULES_DIR", str(release))
    tpl = config.templates()
    opus = tpl.citizen("opus")
    assert opus.budget.max_usd_per_day == 10.0
    assert opus.permissions.get("can_use_network", False) is False
    assert tpl.prices["claude-opus-4-6"].output > 0  # the release's price, not the zero
    assert tpl.dir == code  # prompts and wake types stay the citizen's to evolve


def schema_checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The data each schema check is asked from now on (the checks still run)."""
    templates = importlib.import_module("citizen.config.templates")  # the name is a function too
    checked: list[Any] = []
    real = templates.validate

    def spy(path: Path, data: Any, schema: Any) -> None:
        checked.append(data)
        real(path, data, schema)

    monkeypatch.setattr(templates, "validate", spy)
    return checked


def test_a_budget_is_checked_once_per_content(civ_root: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`citizen status` asks every citizen's budget: the same budget is one check, not
    one per citizen; a bad one is refused every time."""
    for name in ("mira", "opus", "aria"):  # each content checked once here
        config.load_budget(name)
    checked = schema_checks(monkeypatch)
    for name in ("mira", "opus", "aria", "mira"):
        config.load_budget(name)
    assert checked == []  # the same contents again: no check
    own = civ_root / "mira" / "config.json"
    own.parent.mkdir()
    own.write_text(json.dumps({"budget": {"max_usd_per_day": "lots"}}))
    for _ in range(2):
        with pytest.raises(ConfigError):
            config.load_budget("mira")
    assert len(checked) == 2


def test_a_citizens_config_is_checked_against_its_schema_once_per_content(
        civ_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config.load_citizen("mira")  # the templates loaded (each template citizen checked)
    checked = schema_checks(monkeypatch)
    for _ in range(3):  # a wake's load, again and again: the content was checked already
        assert config.load_citizen("mira").focus
    assert checked == []
    own = civ_root / "mira" / "config.json"
    own.parent.mkdir()
    own.write_text(json.dumps({"email": "mira@example.org", "focus": "Systems"}))
    for _ in range(3):  # new content: checked once
        assert config.load_citizen("mira").focus == "Systems"
    assert len(checked) == 1
    own.write_text('{"focus": 7}')  # content that fails is refused every time
    for _ in range(2):
        with pytest.raises(ConfigError) as info:
            config.load_citizen("mira")
        assert info.value.path == own and info.value.key == "focus"
    assert len(checked) == 3
