# cython: language_level=3
# StreamApi: what the events of a typed-event API mean (OpenAI's Responses, Anthropic's Messages), as the
# tables the JSON scanner reads (csrc/fb_json.h, fb_api_t). Built once per run from a protocol module's
# data (fastbench.load.protocols) and shared by every connection of the run: the API is data the one scan
# is given, not a path of its own. Included by engine.pyx.

OUT_ANSWER = FB_OUT_ANSWER        # the answer's text
OUT_REASONING = FB_OUT_REASONING  # reasoning text
OUT_TOOL = FB_OUT_TOOL            # a tool call's text (its arguments)
OUT_DELTA = FB_OUT_DELTA          # output whose kind the delta object's key says
OUT_END = FB_OUT_END              # the event that ends the stream
OUT_ERROR = FB_OUT_ERROR          # an error event


cdef class StreamApi:
    """One typed-event API's tables.

    :param types: each event ``type`` that means something, and its kind (``OUT_*``).
    :param delta_keys: for ``OUT_DELTA`` events, the keys of the ``delta`` object that hold output, and
        each one's kind.
    :param usage_holders: top-level objects whose ``usage`` counts, besides a top-level ``usage``.
    :param output_key: in usage, the output tokens so far.
    :param input_keys: in usage, the counts that add up to the prompt's tokens.
    :param cached_key: in usage, the prompt tokens served from cache ("": none).
    :param details: in usage, an object and its key for those tokens ("", "": none).
    :param end_why: why a stream without its end event failed (the message its requests carry).
    """

    def __cinit__(self, dict types, dict delta_keys, tuple usage_holders, str output_key, tuple input_keys,
                  str cached_key, tuple details, str end_why):
        if len(types) > FB_API_MAX_TYPES or max(len(delta_keys), len(usage_holders), len(input_keys)) > FB_API_MAX_KEYS:
            raise ValueError("a stream API with more names than the scanner's tables hold")
        self.names = []
        self.table.n_types = self.table.n_delta_keys = self.table.n_usage_holders = self.table.n_input_keys = 0
        for name, kind in types.items():
            self._put(&self.table.types[self.table.n_types], name, kind)
            self.table.n_types += 1
        for name, kind in delta_keys.items():
            self._put(&self.table.delta_keys[self.table.n_delta_keys], name, kind)
            self.table.n_delta_keys += 1
        for name in usage_holders:
            self._put(&self.table.usage_holders[self.table.n_usage_holders], name, 0)
            self.table.n_usage_holders += 1
        for name in input_keys:
            self._put(&self.table.input_keys[self.table.n_input_keys], name, 0)
            self.table.n_input_keys += 1
        self._put(&self.table.output_key, output_key, 0)
        self._put(&self.table.cached_key, cached_key, 0)
        self._put(&self.table.details_key, details[0], 0)
        self._put(&self.table.details_cached_key, details[1], 0)
        self.end_why_bytes = end_why.encode()
        self.end_why = self.end_why_bytes

    cdef void _put(self, fb_api_name_t *slot, str name, int kind) except *:
        cdef bytes raw = name.encode()
        if kind < 0 or kind > FB_OUT_ERROR:
            raise ValueError(f"no output kind {kind}")
        self.names.append(raw)  # the table points into it: held as long as the table
        slot.n = len(raw)
        slot.s = NULL
        if slot.n:
            slot.s = <const char *>raw
        slot.kind = kind
