# A typed-event API's tables for the scanner (streamapi.pyx). Included by engine.pxd.


cdef class StreamApi:
    cdef fb_api_t table                # the scanner's tables
    cdef list names                    # the bytes they point into
    cdef bytes end_why_bytes
    cdef const char *end_why           # why a stream that did not end as the API ends failed
    cdef void _put(self, fb_api_name_t *slot, str name, int kind) except *
