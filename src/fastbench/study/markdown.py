"""Markdown to simple HTML, for the report's run cards: the small subset our cards are written in
(``results/card.py``, the study card), with every piece of text escaped.

Blocks: ATX headings, GitHub tables (a header row, a ``|---|`` row, body rows), fenced code, ``-`` /
``*`` bullet lists, paragraphs. Inline: ```code```, ``**bold**``, and links, of which only in-page
ones (``#...``) and relative paths become ``<a>``: a link to a URL stays text with the URL beside it,
so that a rendered card can never make the page reach out of itself. The cards write ``&``, ``<`` and
``>`` outside code as entities (``results.card.escape_markdown``); those three are read back as the
characters they stand for, then escaped once, as any text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

__all__ = ("render",)

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_TABLE_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_BULLET = re.compile(r"^\s*[-*]\s+(.*)$")
_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")
_CARD_ENTITY = re.compile(r"&(amp|lt|gt);")
_CHARACTER = {"amp": "&", "lt": "<", "gt": ">"}


def _text(text: str) -> str:
    """Plain text of a card, escaped: the entities the card wrote read back first, so none is escaped twice."""
    return html.escape(_CARD_ENTITY.sub(lambda m: _CHARACTER[m.group(1)], text))


def inline(text: str) -> str:
    """One line's inline markup, escaped."""
    out: list[str] = []
    last = 0
    for match in _INLINE.finditer(text):
        out.append(_text(text[last:match.start()]))
        code, bold, label, target = match.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{inline(bold)}</strong>")
        elif _URL_SCHEME.match(target):  # a URL (or a scheme of any kind): text, never a link
            out.append(f"{inline(label)} ({_text(target)})")
        else:
            out.append(f'<a href="{html.escape(target, quote=True)}">{inline(label)}</a>')
        last = match.end()
    out.append(_text(text[last:]))
    return "".join(out)


def _cells(row: str) -> list[str]:
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", row)]


def _blocks(lines: list[str]) -> Iterator[str]:
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.lstrip().startswith("```"):
            body = []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end)
            yield f"<pre><code>{html.escape(chr(10).join(body))}</code></pre>"
            continue
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            yield f"<h{level}>{inline(heading.group(2))}</h{level}>"
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            head = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            parts = ["<table>", "<thead><tr>" + "".join(f"<th>{inline(c)}</th>" for c in head) + "</tr></thead>",
                     "<tbody>"]
            parts += ["<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in rows]
            parts += ["</tbody>", "</table>"]
            yield "\n".join(parts)
            continue
        if _BULLET.match(line):
            items: list[str] = []
            while i < len(lines) and lines[i].strip():
                bullet = _BULLET.match(lines[i])
                if bullet:
                    items.append(bullet.group(1))
                elif items:  # a continuation line of the item above
                    items[-1] += " " + lines[i].strip()
                i += 1
            yield "<ul>\n" + "\n".join(f"<li>{inline(item)}</li>" for item in items) + "\n</ul>"
            continue
        paragraph = []
        while i < len(lines) and lines[i].strip() and not _starts_block(lines, i):
            paragraph.append(lines[i].strip())
            i += 1
        if not paragraph:  # a line that looked like a block start but was not one (a lone "|" line)
            paragraph.append(lines[i].strip())
            i += 1
        yield f"<p>{inline(' '.join(paragraph))}</p>"


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(line.lstrip().startswith("```") or _HEADING.match(line) or _BULLET.match(line)
                or (line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1])))


def render(text: str) -> str:
    """The Markdown ``text`` as an HTML fragment."""
    return "\n".join(_blocks(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")))
