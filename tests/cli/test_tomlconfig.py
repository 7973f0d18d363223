"""--config RUN.TOML: every table and value is type-checked, and every value reaches argparse whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastbench import api
from fastbench.cli import command as cli
from fastbench.cli import tomlconfig
from fastbench.cli.argtypes import options
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError


def expand(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return tomlconfig.toml_to_argv(str(path), cli.build_parser())


def parse(tmp_path: Path, text: str) -> BenchConfig:
    argv = expand(tmp_path, text)
    return cli.config_from_args(cli.build_parser().parse_args(argv), argv)


@pytest.mark.parametrize("text,words", [
    ("server = 5\n", "server must be a table ([server] and its keys), got an integer (5)"),
    ('server = "x"\n', "server must be a table ([server] and its keys), got a string ('x')"),
    ("benchmark = [1]\n", "benchmark must be a table ([benchmark] and its keys), got an array"),
    ("[benchmark]\nconcurrency = 1.5\n", "[benchmark] concurrency must be an integer, got a float (1.5)"),
    ('[benchmark]\nnum_prompts = "10"\n', "[benchmark] num_prompts must be an integer, got a string ('10')"),
    ("[benchmark]\nseed = true\n", "[benchmark] seed must be an integer, got a boolean (true)"),
    ('[benchmark]\nmax_seconds = "5"\n', "[benchmark] max_seconds must be a number, got a string ('5')"),
    ("[benchmark]\nsave_detailed = 2024-01-01\n", "[benchmark] save_detailed must be true or false, got a date/time"),
    ("[benchmark]\nlabel = 123\n", "[benchmark] label must be a string, got an integer (123)"),
    ("[benchmark]\nignore_eos = 1\n", "[benchmark] ignore_eos must be true or false, got an integer (1)"),
    ('[benchmark]\nextra_body = "not json"\n', "[benchmark] extra_body must be a table or a JSON object"),
    ("[benchmark]\nextra_body = 3\n", "[benchmark] extra_body must be a table or a JSON object"),
    ("[benchmark]\ngoodput = { ttft = 500, foo = 3 }\n", "[benchmark] goodput takes ttft, tpot and e2el, got 'foo'"),
    ('[benchmark]\ngoodput = { ttft = "fast" }\n', "[benchmark] goodput.ttft must be a number of milliseconds"),
    ("[benchmark]\ngoodput = 500\n", "[benchmark] goodput must be a table such as { ttft = 500 }"),
    ("[benchmark]\nsynthetic_args = 5\n", "[benchmark] synthetic_args must be an array of strings or one string"),
    ("[benchmark]\nsynthetic_args = [{ a = 1 }]\n", "[benchmark] synthetic_args must be an array of strings"),
    ("[server]\nenv = 5\n", "[server] env must be a table of NAME"),
    ("[server]\nenv = { A = [1] }\n", "[server] env must be a table of NAME"),
    ('[server]\nport = "8000"\n', "[server] port must be an integer, got a string ('8000')"),
    ("[server]\nargs = 7\n", "[server] args must be an array of strings or one string of flags"),
    ("[server]\nengine = 1\n", "[server] engine must be a string, got an integer (1)"),
    ('[server]\nengine = "tgi"\n', "[server] engine must be one of 'vllm', 'sglang', 'llama.cpp', got a string"),
    ('[benchmark]\nendpoint = "/v1/x"\n', "[benchmark] endpoint must be one of '/v1/completions'"),
])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand(tmp_path, text)
    message = str(info.value)
    assert message.startswith("run.toml: ") and words in message, message
    assert "\n" not in message


def test_every_value_is_passed_in_the_equals_form(tmp_path: Path) -> None:
    """A value that starts with a dash reaches argparse as the value, not as a flag of its own."""
    config = parse(tmp_path, (
        '[server]\nengine = "vllm"\nmodel = "org/m"\nargs = ["--enforce-eager"]\ndocker_args = "--rm"\n'
        'env = { HF_TOKEN = "", N = 2 }\n'
        '[benchmark]\nlabel = "-x"\nsynthetic_args = ["--no-usage"]\nmodel = "-m"\nseed = 3\n'
        'max_seconds = 2.5\nextra_body = \'{"temperature": 0}\'\n'
    ))
    assert config.launch is not None
    assert config.launch.engine_args == ("--enforce-eager",)
    assert config.launch.docker_args == ("--rm",)
    assert config.launch.env == ("HF_TOKEN", "N=2")
    assert config.label == "-x" and config.model == "-m" and config.synthetic_args == ("--no-usage",)
    assert config.seed == 3 and config.max_seconds == 2.5 and config.extra_body == {"temperature": 0}


def test_args_as_one_string_and_goodput_as_strings(tmp_path: Path) -> None:
    config = parse(tmp_path, (
        '[server]\nengine = "vllm"\nmodel = "org/m"\nargs = "--enforce-eager --max-model-len 2048"\n'
        '[benchmark]\ngoodput = ["ttft:500", "tpot:50"]\n'
    ))
    assert config.launch is not None and config.launch.engine_args == ("--enforce-eager", "--max-model-len", "2048")
    assert config.goodput == {"ttft": 500.0, "tpot": 50.0}


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_bytes("[benchmark]\nconcurrency = 4\n".encode("utf-16"))  # as PowerShell writes by default
    with pytest.raises(ConfigError, match=r"run.toml: not UTF-8 text; save it as UTF-8$"):
        tomlconfig.toml_to_argv(str(path), cli.build_parser())


LAUNCHING = '[server]\nengine = "vllm"\nmodel = "org/m"\nargs = ["--enforce-eager"]\nport = 8001\n' \
            '[benchmark]\nconcurrency = 3\n'


def test_a_base_url_on_the_command_line_attaches_instead_of_the_files_launch(tmp_path: Path) -> None:
    """The file launches a server; --base-url on the command line means "use this running one": the
    file's launch keys are dropped (its other settings stay), not a clash of --launch and --base-url."""
    path = tmp_path / "run.toml"
    path.write_text(LAUNCHING)
    parser = cli.build_parser()
    config_file, argv = tomlconfig.expand(["--config", str(path), "--base-url", "http://h:9"], parser)
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config_file == str(path)
    assert config.launch is None and config.base_url == "http://h:9" and config.concurrency == 3
    assert not [a for a in argv if a.split("=")[0] in tomlconfig.LAUNCH_FLAGS]
    # the other way round: the file attaches, the command line launches
    path.write_text('[server]\nbase_url = "http://h:9"\n')
    _, argv = tomlconfig.expand(["--config", str(path), "--launch", "vllm", "--launch-model", "m"], parser)
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config.launch is not None and config.launch.model == "m" and config.base_url is None
    # without a server on the command line, the file's launch stands
    path.write_text(LAUNCHING)
    _, argv = tomlconfig.expand(["--config", str(path)], parser)
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config.launch is not None and config.launch.port == 8001


def test_a_bad_key_in_the_files_launch_is_still_refused_when_attaching(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[server]\nengine = "vllm"\nport = "x"\n')
    with pytest.raises(ConfigError, match="port must be an integer"):
        tomlconfig.expand(["--config", str(path), "--base-url", "http://h:9"], cli.build_parser())


def test_card_rows_and_notes_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[benchmark]\ncard_row = ["Family=Gemma", "Parameters=33B (dense)"]\ncard_note = "from the file"\n')
    parser = cli.build_parser()
    _, argv = tomlconfig.expand(["--config", str(path), "--card-note", "from the command line"], parser)
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config.card_rows == ("Family=Gemma", "Parameters=33B (dense)")
    assert config.card_notes == ("from the file", "from the command line")


def test_the_command_line_replaces_the_files_dataset_and_server_wholesale(tmp_path: Path) -> None:
    """Flags the command line makes idle are dropped from the file, not refused: a file's ShareGPT
    path under --dataset-name random, a file's synthetic-server flags under --base-url."""
    path = tmp_path / "run.toml"
    dataset = tmp_path / "sg.json"
    dataset.write_text("[]")
    path.write_text(f'[benchmark]\ndataset_name = "sharegpt"\ndataset_path = "{dataset}"\n'
                    'dataset_order = "file"\nsynthetic_args = ["--itl-ms", "5"]\nconcurrency = 3\n')
    parser = cli.build_parser()
    _, argv = tomlconfig.expand(["--config", str(path), "--dataset-name", "random", "--base-url", "http://h:9"],
                                parser)
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config.dataset_name == "random" and config.dataset_path is None and config.dataset_order == "random"
    assert config.synthetic_args == () and config.concurrency == 3
    api.validate(config)  # nothing idle is left to refuse
    # without those flags on the command line, the file's choices stand
    _, argv = tomlconfig.expand(["--config", str(path)], parser)
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config.dataset_path == str(dataset) and config.synthetic_args == ("--itl-ms", "5")


def test_a_value_the_command_line_sets_again_appears_once_in_the_command(tmp_path: Path) -> None:
    """argparse takes the last of a repeated flag; the card's Full run command should not show both."""
    path = tmp_path / "run.toml"
    path.write_text('[benchmark]\nconcurrency = 4\nnum_prompts = 9\ncard_row = ["Company=Acme"]\n')
    _, argv = tomlconfig.expand(["--config", str(path), "--concurrency", "8", "--card-row", "Family=X"],
                                cli.build_parser())
    assert argv == ["--num-prompts=9", "--card-row=Company=Acme", "--concurrency", "8", "--card-row", "Family=X"]
    config = cli.config_from_args(cli.build_parser().parse_args(argv), argv)
    assert config.concurrency == 8 and config.card_rows == ("Company=Acme", "Family=X")
    # as argparse reads them: the = form, an alias (it takes no abbreviation)
    for given in (["--num-prompts=7"], ["--max-concurrency", "8", "--num-prompts", "7"]):
        _, argv = tomlconfig.expand(["--config", str(path), *given], cli.build_parser())
        assert not any(a.startswith("--num-prompts=9") for a in argv), argv
    _, argv = tomlconfig.expand(["--config", str(path), "--max-concurrency", "8"], cli.build_parser())
    assert "--concurrency=4" not in argv


def test_every_option_can_be_set_from_the_file_by_its_name(tmp_path: Path) -> None:
    """The file's keys and their types come from the parser's options: each one, written in [benchmark]
    as the kind of value it takes, reaches argparse as that value."""
    parser = cli.build_parser()
    samples: dict[str, tuple[str, object]] = {
        "true or false": ("true", True), "an integer": ("3", 3), "a number": ("2.5", 2.5),
        "a JSON object": ("{ a = 1 }", {"a": 1}), "flags": ('["--x", "1"]', ("--x", "1")),
        "KEY:MS": ("{ ttft = 5 }", [("ttft", 5.0)]), "KEY=VALUE": ('{ a = "1" }', [("a", "1")]),
        "names, comma-separated": ('["ttft", "e2el"]', ("ttft", "e2el")),
        "numbers, comma-separated": ("[50, 99.9]", (50.0, 99.9)), 'an integer or "auto"': ('"auto"', "auto"),
        'a number or "auto"': ("1.5", 1.5),
    }
    known = [option for option in options(parser) if option.dest != "config"]
    assert len(known) > 40
    for option in known:
        if option.choices:
            text, value = f'"{option.choices[-1]}"', option.choices[-1]
        elif option.repeatable:
            text, value = '["A=1", "B=2"]', ["A=1", "B=2"]
        elif option.several and option.kind == "a string":
            text, value = '["a", "b"]', ["a", "b"]
        else:
            text, value = samples.get(option.kind, ('"x"', "x"))
        argv = expand(tmp_path, f"[benchmark]\n{option.dest} = {text}\n")
        assert getattr(parser.parse_args(argv), option.dest) == value, (option, argv)


def test_a_negated_switch_is_not_a_key(tmp_path: Path) -> None:
    """progress = false writes --no-progress; no_progress is no option of its own (it read as --progress)."""
    assert expand(tmp_path, "[benchmark]\nprogress = false\n") == ["--no-progress"]
    with pytest.raises(ConfigError, match="has no option 'no_progress'"):
        expand(tmp_path, "[benchmark]\nno_progress = true\n")


def test_a_model_beside_base_url_is_the_served_models_name(tmp_path: Path) -> None:
    """``[server] model`` beside ``base_url`` (no engine) names the model the running server serves: --model,
    in a run's --config file and in a sweep's [server] table alike (it was --launch-model, refused for want of
    --launch). Beside ``engine`` it is still what the engine loads."""
    from fastbench.cli.sweep import RunCommand, load_plan

    attached = '[server]\nbase_url = "http://h:9"\nmodel = "gemma3-270m"\n'
    config = parse(tmp_path, attached + "[benchmark]\nconcurrency = 2\n")
    assert config.launch is None and config.base_url == "http://h:9" and config.model == "gemma3-270m"
    launched = parse(tmp_path, '[server]\nengine = "vllm"\nmodel = "org/m"\n')
    assert launched.launch is not None and launched.launch.model == "org/m" and launched.model is None
    sweep = tmp_path / "s.toml"
    sweep.write_text(attached + "[benchmark]\nconcurrency = [1, 2]\nnum_prompts = 2\n")
    plan, _ = load_plan(str(sweep), RunCommand(cli.build_parser, cli.config_from_args), store=str(tmp_path / "st"))
    assert [(c.config.model, c.config.base_url) for c in plan.cells] == [("gemma3-270m", "http://h:9")] * 2
