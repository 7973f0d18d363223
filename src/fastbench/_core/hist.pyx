# cython: language_level=3
# Recorder: C-speed recording into an hdrh.HdrHistogram's layout; included by engine.pyx.


cdef class Recorder:
    """Counts values (ns) in C with the bucket layout of an ``hdrh`` HdrHistogram.

    The counts live in a C array while the run goes on; ``sync()`` copies them into the
    histogram once at the end, so the package's own encoder, merge and percentile code work
    on exactly what was recorded.
    """

    def __cinit__(self, object histogram):
        self.histogram = histogram
        self.layout.unit_magnitude = histogram.unit_magnitude
        self.layout.sub_bucket_half_count_magnitude = histogram.sub_bucket_half_count_magnitude
        self.layout.sub_bucket_half_count = histogram.sub_bucket_half_count
        self.layout.sub_bucket_mask = histogram.sub_bucket_mask
        self.layout.counts_len = histogram.counts_len
        self.layout.highest_value = histogram.highest_trackable_value
        self.counts = <int64_t *>_counted_calloc(<size_t>self.layout.counts_len, sizeof(int64_t))
        if self.counts == NULL:
            raise MemoryError()
        self.total = 0
        self.clamped = 0
        self.negative = 0

    def __dealloc__(self):
        _counted_free(self.counts)

    cdef inline void record(self, int64_t value, int64_t count) noexcept nogil:
        cdef int64_t idx
        if value < 0:
            # Only skew can be negative (a receive stamp before the send stamp would mean the two
            # clocks disagree); counted apart, recorded as 0.
            self.negative += count
            value = 0
        if value > self.layout.highest_value:
            self.clamped += count
            value = self.layout.highest_value
        idx = fb_hdr_index(&self.layout, value)
        if FB_DEBUG:
            _debug_assert(0 <= idx < self.layout.counts_len, "an HDR index outside the counts")
        self.counts[idx] += count
        self.total += count

    def record_value(self, int64_t value, int64_t count=1):
        """Record from Python (tests, rare paths)."""
        self.record(value, count)

    def sync(self):
        """Copy the counts into the histogram and fix its totals; returns the histogram."""
        cdef int64_t i, lo = -1, hi = -1
        cdef int64_t[::1] dest = memoryview(self.histogram.counts).cast("B").cast("q")
        for i in range(self.layout.counts_len):
            dest[i] = self.counts[i]
            if self.counts[i]:
                if lo < 0:
                    lo = i
                hi = i
        self.histogram.set_internal_tacking_values(lo, hi, self.total)
        return self.histogram

    def copy_counts(self, object out):
        """Copy the running counts into ``out`` (int64, as long as the histogram's counts) while the run
        goes on, without touching the histogram; returns the total at the copy. For a live view read a
        few times a second off the hot path: one memcpy, no sync."""
        cdef int64_t[::1] dest = out
        if dest.shape[0] != self.layout.counts_len:
            raise ValueError(f"copy_counts: {dest.shape[0]} slots for {self.layout.counts_len} counts")
        memcpy(&dest[0], self.counts, <size_t>self.layout.counts_len * sizeof(int64_t))
        return self.total

    @property
    def total_count(self):
        return self.total

    @property
    def clamped_count(self):
        return self.clamped

    @property
    def negative_count(self):
        return self.negative
