"""The Markdown outputs carry no raw HTML: a label, a card row or a server-supplied model name is written with
its ``&``, ``<`` and ``>`` as entities outside code (as the HTML report escapes them), reads back as the same
text, and the report renders it escaped once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fastbench import BenchConfig, run
from fastbench.results.card import escape_markdown
from fastbench.study import markdown
from fastbench.study.figures_data import NO_VARIANT, RunPoint
from fastbench.study.study_card import render_study_card

ATTACK = '<img src=x onerror="alert(1)">'


def _raw_html_outside_code(card: str) -> list[str]:
    """The tags a CommonMark renderer would pass through: outside fenced blocks and code spans."""
    text = re.sub(r"^```.*?^```", "", card, flags=re.S | re.M)
    text = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)
    return re.findall(r"<[A-Za-z/!?]", text)


@pytest.mark.parametrize(("text", "written"), [
    ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
    (ATTACK, "&lt;img src=x onerror=\"alert(1)\"&gt;"),
    ("`<kept>` in code", "`<kept>` in code"),
    ("``<two `ticks`>``", "``<two `ticks`>``"),
    ("``<unclosed>`", "``&lt;unclosed&gt;`"),  # no span: CommonMark passes the tag through
    ("\\`<img>`", "\\`&lt;img&gt;`"),  # an escaped backtick opens nothing
    ("\\<b>", "&lt;b&gt;"),
    ("&lt; stays text", "&amp;lt; stays text"),
    ("```\n<in a fence>\n```\n<after>", "```\n<in a fence>\n```\n&lt;after&gt;"),
    ("```\n--label '\n```\n<img>'\n```", "```\n--label '\n```\n&lt;img&gt;'\n```"),  # an argument closing the fence
])
def test_escape_leaves_no_html_outside_code(text: str, written: str) -> None:
    assert escape_markdown(text) == written
    assert not _raw_html_outside_code(escape_markdown(text))


def test_the_report_renders_the_entities_once() -> None:
    html = markdown.render(escape_markdown(f"# {ATTACK}\n\n| a | b & {ATTACK} |\n|---|---|\n\n- note &lt;"))
    assert "<img" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert "b &amp; &lt;img" in html
    assert "note &amp;lt;" in html  # the user's own "&lt;" stays those four characters


def test_a_run_card_escapes_the_label_rows_notes_and_served_model_name(tmp_path: Path) -> None:
    config = BenchConfig(num_prompts=2, concurrency=1, random_input_len=8, random_output_len=4,
                         synthetic_args=("--model", "m<script>x</script>", "--ttft-ms", "1", "--itl-ms", "1"),
                         label=ATTACK, card_rows=("GPU=<b>H100</b>",), card_notes=("see <a href=x>here</a>",),
                         result_card=tmp_path / "card.md")
    assert run(config).counts.completed == 2
    card = (tmp_path / "card.md").read_text()
    assert not _raw_html_outside_code(card), card
    for written in ("m&lt;script&gt;x&lt;/script&gt;", "&lt;img src=x", "&lt;b&gt;H100&lt;/b&gt;",
                    "see &lt;a href=x&gt;here&lt;/a&gt;"):
        assert written in card
    assert "<img" not in markdown.render(card) and "<script" not in markdown.render(card)


def test_a_study_card_escapes_model_names_variants_and_notes() -> None:
    flat = {"model_id": "<script>m</script>", "output_throughput": 10.0}
    card = render_study_card("<b>study</b>", [RunPoint("r1", NO_VARIANT, 4, None, flat, None)], [],
                             configuration=[("Label", ATTACK)], commands=["fastbench --label '<x>'"],
                             notes=["<i>note</i>"], figure_file=None)
    assert not _raw_html_outside_code(card), card
    assert "&lt;b&gt;study&lt;/b&gt;" in card and "&lt;script&gt;m&lt;/script&gt;" in card
    assert "fastbench --label '<x>'" in card  # the command, in its code block, as it is
