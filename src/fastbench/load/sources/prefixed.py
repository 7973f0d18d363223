"""Random prompts behind shared prefixes: what ``random`` with ``--random-prefix-len``, ``prefix_repetition``
and ``generated-shared-prefix`` are made of.

Tokens are drawn as the ``random`` dataset draws them, in one of three forms, chosen as it chooses:

* a local tokenizer (``--tokenizer``): random tokens decoded to text of exactly the drawn length
  (``LocalTokenizer.random_text``), the prefix's text and the suffix's joined by the dataset's separator
  and the whole counted again (the boundary may merge tokens; the prefix's earlier blocks stay the same);
* ``/v1/completions`` without one: token-id arrays, counted exactly (``token-ids``);
* chat without one: random common words joined by spaces, one word taken as one token (``estimate (words)``).

Each prompt is serialised here once as its JSON value (``JsonPrompt``), the prefix's JSON made once and
spliced into every prompt that shares it: 100,000 prompts behind a 2,048-token prefix are not 100,000
serialisations of it (bench/bench_shared_prefix.py measures it). The random tokens themselves (the
token-id range, the word list) are the ``random`` dataset's, kept here, where both draw them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson

from fastbench.exceptions import ConfigError
from fastbench.load.screening import Candidate, JsonPrompt
from fastbench.load.sharing import SharedBlocks
from fastbench.load.sources import Context
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

# Random token-id prompts without a tokenizer: ids inside every common vocabulary (Llama 2 has 32000)
# and clear of the control tokens kept at the low end (Mistral's tekken reserves 0-999).
TOKEN_ID_LOW, TOKEN_ID_HIGH = 1000, 30000

# Common English words that most BPE vocabularies hold as one token (with the leading space).
_WORD_TEXT = """
the of and to in is was for on that with as by at from his her they this had not are but be have
which one you were all she there would their we him been has when who will more no if out so said
what up its about into than them can only other new some could time these two may then do first any
my now such like our over man me even most made after also did many before must through back years
where much your way well down should because each just those people how too little state good very
make world still own see men work long get here between both life being under never day same another
know while last might us great old year off come since against go came right used take three small
house water place part number sound word light hand high food open tree city earth eye head story
saw far sea draw left late run hold river car feet care second book carry took science room friend
began idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain
girl usual young ready above ever red list though feel talk bird soon body dog family direct pose
leave song measure door product black short class wind question happen complete ship area half rock
order fire south problem piece told knew pass farm top whole king size heard best hour better true
during hundred five remember step early west ground interest reach fast verb sing listen six table
travel less morning ten simple several toward war lay pattern slow center love person money serve
appear road map rain rule govern pull cold notice voice unit power town fine
"""
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())

_WORD_ARRAY = np.array(WORDS, dtype=object)
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def refuse_unless_fits(max_model_len: int | None, parts: tuple[tuple[str, int], tuple[str, int]], output: int,
                       shorten: str) -> None:
    """Refuse a dataset whose prompts (two parts, each a flag and its tokens) and ``output`` tokens cannot fit
    the context the server reports (``checks.check_prefix_fits`` judges --max-model-len before the run)."""
    (first_flag, first), (second_flag, second) = parts
    if max_model_len is not None and first + second + output > max_model_len:
        raise ConfigError(f"{first_flag} {first} + {second_flag} {second} + {output} output tokens exceed "
                          f"max_model_len {max_model_len}: no prompt fits; shorten {shorten}")


@dataclasses.dataclass(frozen=True)
class Prefix:
    """One shared prefix, made once."""

    open_json: bytes  # its JSON without the closing bracket or quote: b'[1,2,3' or b'"some text'; b'' if empty
    text: str  # text: the prefix; token ids: ""
    tokens: int


def _shares(prefix: Prefix) -> SharedBlocks | None:
    """What a prompt behind ``prefix`` shares with the others behind it: the prefix, one block (load.sharing)."""
    return SharedBlocks((prefix,), prefix.tokens) if prefix.tokens else None


class PromptMaker:
    """Makes prefixes and prefixed prompts in the form the run needs (see the module's docstring)."""

    def __init__(self, ctx: Context, rng: np.random.Generator, separator: str) -> None:
        self.local = ctx.local
        self.rng = rng
        self.separator = separator  # between a text prefix and its suffix (token ids: none)
        if ctx.local is not None:
            self.form, self.source = "text", ctx.local.source
        elif ctx.chat:
            self.form, self.source = "words", SOURCE_WORDS
            self.separator = separator or " "  # words stay words
        else:
            self.form, self.source = "ids", SOURCE_TOKEN_IDS

    def note(self) -> str:
        if self.form == "text":
            return "prompt_len counts each whole prompt without special tokens; the server may add BOS"
        if self.form == "words":
            return "chat prompts are random common words, one word taken as one token"
        return f"prompts sent as token-id lists, ids drawn from [{TOKEN_ID_LOW}, {TOKEN_ID_HIGH})"

    def prefix(self, tokens: int) -> Prefix:
        if tokens == 0:
            return Prefix(b"", "", 0)
        if self.form == "ids":
            ids = self.rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=tokens)
            return Prefix(orjson.dumps(ids, option=_NUMPY)[:-1], "", tokens)
        text, tokens = self._text(tokens)
        return Prefix(orjson.dumps(text)[:-1], text, tokens)

    def _text(self, tokens: int) -> tuple[str, int]:
        if self.local is not None:
            return self.local.random_text(self.rng, tokens)
        return " ".join(_WORD_ARRAY[self.rng.integers(0, len(WORDS), size=tokens)]), tokens

    def prompts(self, prefixes: list[Prefix], suffix_lens: list[int], max_tokens: list[int]) -> list[Candidate]:
        """One candidate per (prefix, suffix length, output tokens): the prefix, then a fresh random suffix."""
        if self.form == "ids":
            return self._id_prompts(prefixes, suffix_lens, max_tokens)
        prompts: list[JsonPrompt] = []
        counts: list[int] = []
        texts: list[str] = []  # with a tokenizer: the whole prompts, to count
        uniform = self.local is None and suffix_lens and min(suffix_lens) == max(suffix_lens) > 0
        words = self._word_suffixes(len(suffix_lens), suffix_lens[0]) if uniform else None
        separator = orjson.dumps(self.separator)[1:-1]
        for i, (prefix, n) in enumerate(zip(prefixes, suffix_lens)):
            if words is not None:
                suffix = words[i]
            else:
                suffix, n = self._text(n) if n else ("", 0)
            if not prefix.text:
                prompts.append(JsonPrompt((orjson.dumps(suffix),), len(suffix)))
            elif not suffix:
                prompts.append(JsonPrompt((prefix.open_json, b'"'), len(prefix.text)))
            else:  # the prefix's JSON made once, the suffix's here
                prompts.append(JsonPrompt((prefix.open_json, separator, orjson.dumps(suffix)[1:]),
                                          len(prefix.text) + len(self.separator) + len(suffix)))
            counts.append(prefix.tokens + n)
            if self.local is not None:
                texts.append(prefix.text + self.separator + suffix if prefix.text and suffix else prefix.text + suffix)
        if self.local is not None:  # the joins may merge tokens: count what is sent
            counts = self.local.count(texts, special=False)
        return [Candidate(p, n, m, self.source, shares=_shares(prefix))
                for p, n, m, prefix in zip(prompts, counts, max_tokens, prefixes)]

    def _word_suffixes(self, count: int, length: int) -> list[str]:
        """``count`` suffixes of ``length`` random words, made in one join: a row ends with a word of its
        own ("\n", which no word holds), and the whole splits there."""
        rows = np.empty((count, length + 1), dtype=object)
        rows[:, :length] = _WORD_ARRAY[self.rng.integers(0, len(WORDS), size=(count, length))]
        rows[:, length] = "\n"
        out = " ".join(rows.ravel().tolist()).split(" \n ")
        out[-1] = out[-1][:-2]  # the last row's " \n"
        return out

    def _id_prompts(self, prefixes: list[Prefix], suffix_lens: list[int], max_tokens: list[int]) -> list[Candidate]:
        source = self.source
        suffixes = self._id_suffixes(suffix_lens)  # each b'4,5' (no brackets)
        out = []
        for prefix, suffix, n, m in zip(prefixes, suffixes, suffix_lens, max_tokens):
            if prefix.tokens == 0:
                parts: tuple[bytes, ...] = (b"[", suffix, b"]")
            elif n == 0:
                parts = (prefix.open_json, b"]")
            else:
                parts = (prefix.open_json, b",", suffix, b"]")
            out.append(Candidate(JsonPrompt(parts, 0), prefix.tokens + n, m, source, shares=_shares(prefix)))
        return out

    def _id_suffixes(self, lengths: list[int]) -> list[bytes]:
        """Random token ids of each length, as JSON array contents. One serialisation of them all where
        the lengths are the same (then the rows split at ``],[``), else one per suffix."""
        if not lengths:
            return []
        if min(lengths) == max(lengths) > 0:
            rows = self.rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=(len(lengths), lengths[0]))
            return orjson.dumps(rows, option=_NUMPY)[2:-2].split(b"],[")
        flat = self.rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=sum(lengths))
        out, start = [], 0
        for n in lengths:
            out.append(orjson.dumps(flat[start:start + n], option=_NUMPY)[1:-1])
            start += n
        return out
