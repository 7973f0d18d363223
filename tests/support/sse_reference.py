"""Pure-Python reference for the SSE scanner in csrc/fb_sse.c.

A direct transcription of WHATWG HTML, 9.2.6 "Parsing an event stream" / "Interpreting an event
stream", kept deliberately naive (whole input, one line at a time) so that it is easy to check
against the spec text. It works on bytes, like the C scanner: the spec decodes UTF-8 first, but
every byte that the algorithm looks at is ASCII, so scanning bytes gives the same fields.

Only the data of each dispatched event is returned, as the C scanner only keeps data.
"""

from __future__ import annotations

BOM = b"\xef\xbb\xbf"


def split_lines(stream: bytes) -> tuple[list[bytes], bytes]:
    """end-of-line = ( cr lf / cr / lf ). Returns the complete lines and the unterminated rest."""
    lines: list[bytes] = []
    start = i = 0
    n = len(stream)
    while i < n:
        c = stream[i]
        if c == 0x0D or c == 0x0A:
            lines.append(stream[start:i])
            if c == 0x0D and i + 1 < n and stream[i + 1] == 0x0A:
                i += 1
            start = i + 1
        i += 1
    return lines, stream[start:]


def parse(stream: bytes) -> list[bytes]:
    """Events' data, in order. An unterminated last event is discarded ("at EOF")."""
    stream = stream.removeprefix(BOM)  # "One leading U+FEFF BYTE ORDER MARK character must be ignored"
    lines, _rest = split_lines(stream)
    events: list[bytes] = []
    data = b""  # the spec's data buffer, with a LF after every data value
    for line in lines:
        if line == b"":
            # "Dispatch the event": an empty data buffer means no event.
            if data:
                events.append(data[:-1] if data.endswith(b"\n") else data)
            data = b""
            continue
        if line.startswith(b":"):
            continue  # comment
        if b":" in line:
            field, value = line.split(b":", 1)
            if value.startswith(b" "):
                value = value[1:]
        else:
            field, value = line, b""
        if field == b"data":
            data += value + b"\n"
        # "event", "id", "retry" and unknown fields do not change the data.
    return events


def encode_events(events: list[bytes]) -> bytes:
    """The shim's output format: each event as a native u32 length and its bytes."""
    import struct

    return b"".join(struct.pack("=I", len(e)) + e for e in events)


def decode_events(blob: bytes) -> list[bytes]:
    import struct

    out: list[bytes] = []
    i = 0
    while i < len(blob):
        (n,) = struct.unpack_from("=I", blob, i)
        out.append(blob[i + 4 : i + 4 + n])
        i += 4 + n
    return out
