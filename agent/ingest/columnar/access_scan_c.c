/* The compiled status/size scan of nginx/Apache access-log lines (issue 27).
 *
 * Contract: scan(chunk, starts, ends, ts, status, size, flags) -> int
 *   chunk   any C-contiguous buffer of bytes (bytes, memoryview): the lines' bytes, read only;
 *   starts, ends  int64 arrays of n line offsets: line i is chunk[starts[i]:ends[i]] (ends[i]
 *           is its newline's offset, the newline itself is never read);
 *   ts      float64[n], status int64[n], size int64[n], flags uint8[n]: written for every line.
 * For every line it decides, flags[i] has OK (1), NULL_STATUS (2) for a `-` status, and
 * REPAIRED (4) when the row parser's decoding of an escaped quoted field is invalid UTF-8;
 * ts, status and size hold the row parser's values. Every other line has flags[i] == 0 and
 * zeros elsewhere: it is *undecided*, for the exact path (agent/ingest/columnar/access.py,
 * then the row parser). Returns the number of decided lines.
 *
 * A line is decided exactly when the numpy kernel (access_status.py) decides it, with the
 * same values: `IP IDENT USER [TIME] "REQUEST" STATUS SIZE` then the end of the line or a
 * space; IP IDENT USER three printable-ASCII words (5..64 bytes, single spaces); TIME 26
 * bytes `dd/Mon/yyyy:HH:MM:SS +zzzz` converted as AccessLogParser.timestamp converts it; the
 * request closed by its line's second quote, which no backslash precedes; STATUS ASCII
 * `[0-9]{3}` or `-`, SIZE `[0-9]{1,18}` or `-`. A line holding a `\xHH` escape of a byte from
 * 0x80 up has the fields the row parser decodes (the request; the referer and user agent when
 * the combined group matches) that hold one checked: decoded and validated here when every
 * backslash in the field starts `\xHH`, else undecided; a referer or agent that might end at
 * an escaped quote leaves the line undecided. The caller leaves out the lines whose own bytes
 * are invalid UTF-8 (it knows them already).
 *
 * Safety: it runs in the agent's own process on hostile bytes. Every read is inside
 * [starts[i], ends[i]), checked against the chunk's length first (a line outside the chunk is
 * undecided); positions past a line's end read as a newline without touching memory; the
 * arrays' types, dimensions and lengths are checked (ValueError). The GIL is released during
 * the scan; the buffers stay exported (so unresizable) until it ends.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum { OK = 1, NULL_STATUS = 2, REPAIRED = 4 };

#define TIME_LEN 26         /* dd/Mon/yyyy:HH:MM:SS +zzzz */
#define HEAD_MIN (TIME_LEN + 9) /* the shortest head: `a b c [TIME] ` */
#define IDS_MIN 5
#define IDS_MAX 64          /* longer `IP IDENT USER` parts are undecided */
#define DIGITS_MAX 18       /* longer sizes are undecided (int64) */

typedef struct {
    const uint8_t *p; /* the line's first byte */
    Py_ssize_t len;   /* its length, newline excluded */
} Line;

/* The byte at k, or a newline past the line's end (the numpy kernel reads the newline
 * there; every check stops at it). */
static inline uint8_t at(const Line *l, Py_ssize_t k) { return k < l->len ? l->p[k] : '\n'; }

static inline int is_digit(uint8_t c) { return (uint8_t)(c - '0') <= 9; }

static inline int hex_value(uint8_t c)
{
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* the offset of the first `c` in [from, l->len), or -1 */
static inline Py_ssize_t find(const Line *l, Py_ssize_t from, uint8_t c)
{
    if (from >= l->len) return -1;
    const uint8_t *q = memchr(l->p + from, c, (size_t)(l->len - from));
    return q ? q - l->p : -1;
}

/* ---- the time: AccessLogParser.timestamp, for the 26 bytes it can accept ------------------ */

static const char MONTHS[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const int DAYS_IN_MONTH[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

static inline int two(const uint8_t *t) { return (t[0] - '0') * 10 + (t[1] - '0'); }

/* days since 1970-01-01 of a proleptic Gregorian date (formats.days_from_civil) */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400; /* y >= -1: floor division */
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Epoch seconds of t[0:26] into *out; 0 when the row parser refuses it. */
static int clf_time(const uint8_t *t, double *out)
{
    static const int digits[] = {0, 1, 7, 8, 9, 10, 12, 13, 15, 16, 18, 19, 22, 23, 24, 25};
    for (size_t k = 0; k < sizeof digits / sizeof digits[0]; k++)
        if (!is_digit(t[digits[k]])) return 0;
    if (t[2] != '/' || t[6] != '/' || t[11] != ':' || t[14] != ':' || t[17] != ':' ||
        t[20] != ' ' || (t[21] != '+' && t[21] != '-'))
        return 0;
    int month = 0;
    for (int m = 0; m < 12; m++)
        if (memcmp(t + 3, MONTHS[m], 3) == 0) month = m + 1;
    if (!month) return 0;
    int d = two(t), y = two(t + 7) * 100 + two(t + 9);
    int hh = two(t + 12), mi = two(t + 15), ss = two(t + 18);
    if (d < 1 || d > DAYS_IN_MONTH[month - 1]) return 0;
    if (month == 2 && d == 29 && (y % 4 || (y % 100 == 0 && y % 400))) return 0;
    if (hh >= 24 || mi >= 60 || ss >= 61) return 0;
    int64_t base = days_from_civil(y, month, d) * 86400 + hh * 3600 + mi * 60 + (ss > 59 ? 59 : ss);
    int64_t offset = (int64_t)two(t + 22) * 3600 + (int64_t)two(t + 24) * 60;
    *out = (double)(t[21] == '+' ? base - offset : base + offset);
    return 1;
}

/* ---- the escapes ------------------------------------------------------------------------- */

/* A `\xHH` escape of a byte from 0x80 up starts at k (formats.decode_escapes can only turn
 * those into invalid UTF-8). */
static inline int high_escape(const Line *l, Py_ssize_t k)
{
    return k + 2 < l->len && l->p[k + 1] == 'x' && hex_value(l->p[k + 2]) >= 8;
}

static int has_high_escape(const Line *l, Py_ssize_t lo, Py_ssize_t hi)
{
    for (Py_ssize_t k = find(l, lo, '\\'); k >= 0 && k < hi; k = find(l, k + 1, '\\'))
        if (high_escape(l, k)) return 1;
    return 0;
}

/* one byte through a strict UTF-8 validator (Python's: no overlongs, surrogates or code
 * points past U+10FFFF); *need continuation bytes still expected, the next in [*lo, *hi] */
static inline int utf8_step(int *need, uint8_t *lo, uint8_t *hi, uint8_t c)
{
    if (*need) {
        if (c < *lo || c > *hi) return 0;
        (*need)--;
        *lo = 0x80, *hi = 0xBF;
        return 1;
    }
    if (c < 0x80) return 1;
    *lo = 0x80, *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) *need = 1;
    else if (c == 0xE0) *need = 2, *lo = 0xA0;
    else if (c == 0xED) *need = 2, *hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) *need = 2;
    else if (c == 0xF0) *need = 3, *lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) *need = 3;
    else if (c == 0xF4) *need = 3, *hi = 0x8F;
    else return 0;
    return 1;
}

/* The field l[lo:hi] with its escapes decoded: 1 valid UTF-8, 0 invalid (a repair), -1 a
 * backslash that does not start `\xHH` (decode_escapes would read it otherwise: undecided).
 * Each `\xHH` stands for its byte: decode_escapes keeps a few as text, but only escapes of
 * printable ASCII bytes, which are ASCII either way. */
static int decoded_valid(const Line *l, Py_ssize_t lo, Py_ssize_t hi)
{
    int need = 0;
    uint8_t vlo = 0x80, vhi = 0xBF;
    int valid = 1;
    for (Py_ssize_t k = lo; k < hi; k++) {
        uint8_t c = l->p[k];
        if (c == '\\') {
            int h1, h2;
            if (k + 3 >= hi || l->p[k + 1] != 'x' || (h1 = hex_value(l->p[k + 2])) < 0 ||
                (h2 = hex_value(l->p[k + 3])) < 0)
                return -1;
            c = (uint8_t)(h1 * 16 + h2);
            k += 3;
        }
        if (valid && !utf8_step(&need, &vlo, &vhi, c)) valid = 0;
    }
    return valid && need == 0;
}

/* The checked field l[lo:hi], when it holds a high escape: 0 fine, REPAIRED, or -1 undecided */
static int field_flag(const Line *l, Py_ssize_t lo, Py_ssize_t hi)
{
    if (!has_high_escape(l, lo, hi)) return 0;
    int v = decoded_valid(l, lo, hi);
    return v < 0 ? -1 : v ? 0 : REPAIRED;
}

/* The repair flag of a line holding a high escape (request l[q1+1:q2], the size's terminator
 * at t): 0, REPAIRED, or -1 undecided. The combined group (` "REFERER" "AGENT"` then the end,
 * a space, or `\r` and the end) is found by its quotes, as the numpy kernel finds it. */
static int escape_flags(const Line *l, Py_ssize_t q1, Py_ssize_t q2, Py_ssize_t t)
{
    int flag = field_flag(l, q1 + 1, q2);
    if (flag < 0) return -1;
    if (!(at(l, t) == ' ' && at(l, t + 1) == '"')) return flag; /* no combined group */
    Py_ssize_t r1 = find(l, t + 2, '"');
    Py_ssize_t a0 = r1 < 0 ? -1 : find(l, r1 + 1, '"');
    Py_ssize_t a1 = a0 < 0 ? -1 : find(l, a0 + 1, '"');
    if (a1 < 0 || l->p[r1 - 1] == '\\') return -1; /* might end at an escaped quote */
    int opens = l->p[r1 + 1] == ' ' && a0 == r1 + 2;
    if (opens && l->p[a1 - 1] == '\\') return -1;
    int closes = a1 + 1 == l->len || l->p[a1 + 1] == ' ' ||
                 (l->p[a1 + 1] == '\r' && a1 + 2 == l->len);
    if (!(opens && closes)) return flag;
    int ref = field_flag(l, t + 2, r1), agent = field_flag(l, a0 + 1, a1);
    if (ref < 0 || agent < 0) return -1;
    return flag | ref | agent;
}

/* ---- one line ---------------------------------------------------------------------------- */

typedef struct {
    uint8_t time[TIME_LEN]; /* the last time converted, and its value */
    double ts;
    int valid, have;
} TimeCache;

/* The three words `IP IDENT USER`: printable ASCII, single spaces, none at either end. */
static int ids_ok(const uint8_t *p, Py_ssize_t len)
{
    if (len < IDS_MIN || len > IDS_MAX || p[0] == ' ' || p[len - 1] == ' ') return 0;
    int spaces = 0;
    for (Py_ssize_t k = 0; k < len; k++) {
        uint8_t c = p[k];
        if (c == ' ') {
            if (p[k - 1] == ' ') return 0; /* k >= 1: p[0] is not a space */
            spaces++;
        } else if (c < 33 || c > 126) {
            return 0;
        }
    }
    return spaces == 2;
}

/* Decide one line: its flags (0: undecided) and values. */
static uint8_t scan_line(const Line *l, TimeCache *tc, double *ts, int64_t *status, int64_t *size)
{
    Py_ssize_t q1 = find(l, 0, '"');
    if (q1 < HEAD_MIN) return 0; /* also q1 == -1 */
    Py_ssize_t q2 = find(l, q1 + 1, '"');
    if (q2 < 0 || l->p[q2 - 1] == '\\') return 0;
    const uint8_t *p = l->p;
    if (p[q1 - 30] != ' ' || p[q1 - 29] != '[' || p[q1 - 2] != ']' || p[q1 - 1] != ' ') return 0;
    if (!ids_ok(p, q1 - 30)) return 0;
    /* ` STATUS SIZE`, then the end of the line or a space */
    Py_ssize_t k = q2 + 1, z;
    uint8_t flags = OK;
    if (at(l, k) != ' ') return 0;
    if (is_digit(at(l, k + 1)) && is_digit(at(l, k + 2)) && is_digit(at(l, k + 3)) &&
        at(l, k + 4) == ' ') {
        *status = (p[k + 1] - '0') * 100 + (p[k + 2] - '0') * 10 + (p[k + 3] - '0');
        z = k + 5;
    } else if (at(l, k + 1) == '-' && at(l, k + 2) == ' ') {
        *status = 0;
        flags |= NULL_STATUS;
        z = k + 3;
    } else {
        return 0;
    }
    int64_t value = 0;
    Py_ssize_t n = 0;
    for (; n <= DIGITS_MAX && is_digit(at(l, z + n)); n++) /* 19 digits: no overflow */
        if (n < DIGITS_MAX) value = value * 10 + (p[z + n] - '0');
    if (n == 0 && at(l, z) == '-') n = 1; /* `-`: 0 bytes */
    else if (n > DIGITS_MAX) return 0;
    uint8_t term = at(l, z + n);
    if (n == 0 || (term != ' ' && term != '\n')) return 0;
    /* the time, converted once per run of equal times */
    const uint8_t *t = p + q1 - 28;
    if (!tc->have || memcmp(tc->time, t, TIME_LEN) != 0) {
        memcpy(tc->time, t, TIME_LEN);
        tc->valid = clf_time(t, &tc->ts);
        tc->have = 1;
    }
    if (!tc->valid) return 0;
    if (has_high_escape(l, 0, l->len)) {
        int repair = escape_flags(l, q1, q2, z + n);
        if (repair < 0) return 0;
        flags |= (uint8_t)repair;
    }
    *ts = tc->ts;
    *size = value;
    return flags;
}

/* ---- the Python entry point -------------------------------------------------------------- */

/* a 1-d C-contiguous buffer of `itemsize` items of a kind in `kinds` (struct codes) */
static int get_array(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize,
                     const char *kinds, const char *name)
{
    int how = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, how) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (view->ndim != 1 || view->itemsize != itemsize || strlen(f) != 1 || !strchr(kinds, *f)) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 1-d array of %zd-byte items (%s)", name,
                     itemsize, kinds);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:scan", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6]))
        return NULL;
    static const struct {
        int writable;
        Py_ssize_t itemsize;
        const char *kinds, *name;
    } spec[7] = {{0, 1, "Bbc", "chunk"}, {0, 8, "lqLQ", "starts"}, {0, 8, "lqLQ", "ends"},
                 {1, 8, "d", "ts"},      {1, 8, "lq", "status"},  {1, 8, "lq", "size"},
                 {1, 1, "B?", "flags"}};
    Py_buffer views[7];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 7; got++)
        if (get_array(objs[got], &views[got], spec[got].writable, spec[got].itemsize,
                      spec[got].kinds, spec[got].name) < 0)
            goto done;
    Py_ssize_t n = views[1].len / 8;
    for (int k = 2; k < 7; k++) {
        if (views[k].len / views[k].itemsize != n) {
            PyErr_Format(PyExc_ValueError, "%s: expected %zd items", spec[k].name, n);
            goto done;
        }
    }
    const uint8_t *buf = views[0].buf;
    Py_ssize_t len = views[0].len;
    const int64_t *starts = views[1].buf, *ends = views[2].buf;
    double *ts = views[3].buf;
    int64_t *status = views[4].buf, *size = views[5].buf;
    uint8_t *flags = views[6].buf;
    Py_ssize_t decided = 0;
    Py_BEGIN_ALLOW_THREADS
    TimeCache tc = {{0}, 0.0, 0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = starts[i], e = ends[i];
        ts[i] = 0.0, status[i] = 0, size[i] = 0, flags[i] = 0;
        if (s < 0 || e < s || e > len) continue; /* not a line of this chunk */
        Line l = {buf + s, (Py_ssize_t)(e - s)};
        flags[i] = scan_line(&l, &tc, &ts[i], &status[i], &size[i]);
        if (!flags[i]) ts[i] = 0.0, status[i] = 0, size[i] = 0;
        decided += flags[i] != 0;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(decided);
done:
    while (got-- > 0) PyBuffer_Release(&views[got]);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(chunk, starts, ends, ts, status, size, flags) -> decided lines (see the module)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "access_scan_c",
    "The compiled status/size scan of access-log lines (agent/ingest/columnar/access_scan.py).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_access_scan_c(void) { return PyModule_Create(&MODULE); }
