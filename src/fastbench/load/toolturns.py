"""An agent's calls sent as the chat turns they were (``--agentic-tool-messages``): each call's prompt cut into
the messages its trace's history implies, tool calls and tool results where the trace marks them.

A trace gives a call's context as one count (``in``), built up over the agent's calls: call j's prompt holds
call i's input (its first ``in[i]`` tokens) and output (the ``out[i]`` after) for each call i before it, then
its own new input. Cut at those offsets, the prompt is a conversation: a user message, then per earlier call
an assistant message (its output) and the message it was answered with (the next call's new input). Where the
next call's input is a tool's result (``tool_result``), the assistant message is a tool call (``tool_calls``,
its output as the arguments) and the answer a ``tool`` message with the call's id. Every call of an agent cuts
its shared history at the same offsets, so a call's messages begin with the one before's exactly, and a
server's prefix cache finds the same prefix it would find in the plain prompts.

A history runs while each call's input is longer than the one before's; a call whose input is not (a context
compacted or restarted) opens a history of its own. An output the next input does not hold whole (a model's
thinking, left out of its history) is cut to what it holds, so that the new input keeps a token at least:
where the next call's messages begin depends on the two calls alone, so every later call cuts there too.
The tokens stay the trace's; the
messages' JSON lies in the token buffer once (``LITERALS``), and each prompt is its runs of tokens cut around
the separators where a message ends, the literals between (``TokenBlocks.insert``): nothing is copied.

Every request carries ``TOOLS`` (one function, ``tool``, taking a string), as an agent's requests carry its
tools on every call, so that they stay in the cached prefix, and ``tool_choice`` "none": a server renders the
tools into the prompt all the same, and answers text. An agent sends "auto", which vLLM refuses unless it runs
with a tool-call parser (``--enable-auto-tool-choice --tool-call-parser ...``); there, ``--extra-body
'{"tool_choice": "auto"}'`` leaves the choice to the model ("required" forces a call). A tool call's deltas
count as output as text's do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ("TOOLS", "TOOL_CHOICE", "Literals", "cuts")

TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "tool", "description": "Run a tool of the agent's.",
    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}}]

# A server without a tool-call parser refuses "auto" (vLLM: 400), and "none" still renders the tools
TOOL_CHOICE = "none"

# The JSON between two messages' contents: after a user's or a tool's, an assistant's opens (its text, or a
# tool call whose arguments hold the output); after the assistant's, the next user's or tool's opens.
_ASSISTANT = b'"},{"role":"assistant","content":"'
_USER = b'"},{"role":"user","content":"'
_TOOL_CALL = b'"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function",' \
             b'"function":{"name":"tool","arguments":"{\\"input\\":\\"'
_TOOL = b'\\"}"}}]},{"role":"tool","tool_call_id":"call_%d","content":"'


class Literals:
    """The messages' JSON, laid once after the tokens: literal 0 opens an assistant's text, 1 a user's message,
    ``2 + 2i`` a tool call of the agent's call i and ``3 + 2i`` the tool message that answers it."""

    def __init__(self, calls: int) -> None:
        pieces = [_ASSISTANT, _USER]
        for i in range(calls):
            pieces += [_TOOL_CALL % i, _TOOL % i]
        self.bytes = b"".join(pieces)
        lengths = np.array([len(p) for p in pieces], dtype=np.int64)
        self.starts = np.cumsum(lengths) - lengths  # from the literals' first byte
        self.ends = self.starts + lengths


def cuts(inputs: np.ndarray, outputs: np.ndarray, tool_result: np.ndarray, agent_first: np.ndarray,
         calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Where prompts are cut into messages. The agents' calls are given end to end (``inputs``, ``outputs``,
    ``tool_result``; agent a's from ``agent_first[a]``), the prompts as the calls they are (``calls``, indices
    there, in the order the prompts are laid out). Returns (prompt, token, literal, turns): in prompt
    ``prompt[i]`` literal ``literal[i]`` goes before token ``token[i]``, ordered by prompt, then token; ``turns``
    is the most calls one history holds (``Literals(turns)`` numbers them all)."""
    n = len(inputs)
    first_of_agent = np.zeros(n, dtype=bool)
    first_of_agent[agent_first] = True
    continues = np.zeros(n, dtype=bool)
    continues[1:] = inputs[1:] > inputs[:-1]
    continues &= ~first_of_agent
    history = np.maximum.accumulate(np.where(continues, 0, np.arange(n)))  # each call's history's first call
    before = calls - history[calls]  # calls of its history before each prompt's
    earlier = np.repeat(calls - before, before) + np.arange(int(before.sum())) - np.repeat(np.cumsum(before) - before,
                                                                                            before)
    prompt = np.repeat(np.arange(len(calls)), 2 * before)
    answered = np.minimum(inputs[earlier] + outputs[earlier], inputs[earlier + 1] - 1)  # the next input opens there
    token = np.column_stack([inputs[earlier], answered]).reshape(-1)
    turn = earlier - history[earlier]  # the earlier call's index in its history: its tool call's id
    tool = tool_result[earlier + 1]  # the next call's input is a tool's result: the earlier call's output a tool call
    literal = np.column_stack([np.where(tool, 2 + 2 * turn, 0), np.where(tool, 3 + 2 * turn, 1)]).reshape(-1)
    return prompt, token, literal, int(turn.max()) + 1 if turn.size else 0
