# Histograms: values recorded into an HDR histogram's layout (hist.pyx). Included by engine.pxd.


cdef class Recorder:
    cdef object histogram             # the hdrh.HdrHistogram the counts are synced into
    cdef fb_hdr_layout_t layout        # its bucket layout, copied at init
    cdef int64_t *counts               # owned; counts_len entries
    cdef int64_t total                 # values recorded (with their counts)
    cdef int64_t clamped               # values above highest_value, recorded as it
    cdef int64_t negative              # negative values, recorded as 0
    cdef inline void record(self, int64_t value, int64_t count) noexcept nogil
