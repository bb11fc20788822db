/* json_scan_c: a strict JSON-lines scanner for the projected JSON kernel (json_native.py).
 *
 * Contract: scan(chunk, starts, ends, names, kinds, vals, offs, status) -> list
 *   chunk   any C-contiguous buffer (bytes): the chunk, read in place, never written;
 *   starts, ends   int64 buffers of n line bounds (line i is chunk[starts[i]:ends[i]],
 *                  its newline excluded); each bound is checked against the chunk first;
 *   names   tuple of F bytes: the projected top-level keys (UTF-8, unescaped);
 *   kinds   writable uint8[F*n]: per field and line, what the value was (K_* below);
 *   vals    writable int64[F*n]: the int64, or the float64's bits, or for K_FLOAT_TEXT the
 *           number's text as (offset << 20 | length) in the chunk (Python converts it);
 *   offs    writable int32[F*(n+1)]: per field, Arrow string offsets into that field's bytes;
 *   status  writable uint8[n]: 0 decided, 1 for the row parser (invalid, or undecided).
 * Returns F bytes objects: each field's string bytes (UTF-8, escapes decoded).
 *
 * A line is decided (status 0) only when it is one JSON object per RFC 8259 with only JSON
 * whitespace around it, that orjson (the row parser) reads with the same values: strict UTF-8
 * and no control characters in strings, no lone surrogates, depth at most MAX_DEPTH (orjson:
 * 1024), no integer of 20+ digits nor a number of more than MAX_DIGITS digits or a 3+ digit
 * exponent anywhere (where orjson may overflow or make a float), projected integers within
 * int64, projected keys unescaped and given once. Anything else is left to the row parser:
 * status 1, with the line's outputs reset (kinds K_MISSING, no string bytes). Blank lines too.
 * Floats are exact: Clinger's fast path (the digits as an integer <= 2**53, |exponent| <= 22:
 * one correctly rounded IEEE operation), else glibc's correctly rounded strtod_l in the "C"
 * locale, else (not glibc) K_FLOAT_TEXT for Python's correctly rounded float(). Nested values
 * of projected keys are validated and reported as K_NESTED. Plain strings (no escape, ASCII)
 * are found 16 bytes at a time (SSE2, every x86-64), else 8 (SWAR).
 *
 * Safety: every read is checked against the line's end, every write against its buffer's
 * size (string bytes grow by the line's remaining length before a value is decoded: a decoded
 * string is never longer than its JSON text); no recursion (containers are skipped with a
 * bounded explicit stack). The GIL is released during the scan.
 */
#define _GNU_SOURCE /* strtod_l, newlocale (glibc) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __GLIBC__
#include <locale.h>
#include <stdlib.h>
static locale_t C_LOCALE; /* strtod_l in the "C" locale: '.' whatever the process's locale */
#endif

enum { K_MISSING, K_NULL, K_FALSE, K_TRUE, K_INT, K_FLOAT, K_FLOAT_TEXT, K_STR, K_NESTED };
#define MAX_DEPTH 512 /* deeper lines go to the row parser (orjson refuses beyond 1024) */
#define MAX_FIELDS 64
#define MAX_DIGITS 200 /* with an exponent of <= 2 digits no such number overflows float64 */
#define TEXT_BITS 20

typedef struct {
    const uint8_t *name;
    Py_ssize_t len;
    uint8_t *kind;
    int64_t *val;
    int32_t *off;
    uint8_t *str; /* PyMem_Raw buffer, grown as needed */
    size_t cap, pos;
} Field;

typedef struct {
    const uint8_t *base, *p, *end;
    int oom;
} Cur;

static uint8_t PLAIN[256]; /* string bytes copied as they are: 0x20..0x7f but '"' and '\\' */
static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The 8 bytes at p as a mask whose lowest set bit falls in the first byte that ends a plain
 * run ('"', '\\', < 0x20, >= 0x80): the borrows of the zero-byte tests only flag bytes
 * after a true one, so the lowest flag is exact (0: all 8 plain). Little-endian loads. */
static inline uint64_t special8(const uint8_t *p) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t x, q, b;
    memcpy(&x, p, 8);
    q = x ^ (ones * '"');
    b = x ^ (ones * '\\');
    return (((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x) | x) & highs;
}

#if defined(__SSE2__)
#include <emmintrin.h>
/* The 16 bytes at p as a bit mask of the bytes that end a plain run: '"', '\\', and every
 * byte that is < 0x20 or >= 0x80 - one signed compare catches both (bytes >= 0x80 are
 * negative as int8). Bit k is byte k; 0: all 16 plain. */
static inline unsigned special16(const uint8_t *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m128i q = _mm_cmpeq_epi8(x, _mm_set1_epi8('"'));
    __m128i b = _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'));
    __m128i lo = _mm_cmplt_epi8(x, _mm_set1_epi8(0x20));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, b), lo));
}
#endif

static inline void ws(Cur *c) {
    /* JSON whitespace is <= ' ': one compare settles the usual case (compact JSON: none) */
    while (c->p < c->end && *c->p <= ' ' &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

static int hex4(const uint8_t *p, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t h = p[k];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= h - '0';
        else if ((h | 32) >= 'a' && (h | 32) <= 'f') v |= (h | 32) - 'a' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

/* One UTF-8 sequence of 2-4 bytes at p (p[0] >= 0x80): its length, or 0 if invalid. */
static int utf8_len(const uint8_t *p, const uint8_t *end) {
    uint8_t b = p[0];
    Py_ssize_t left = end - p;
    if (b >= 0xC2 && b <= 0xDF) return (left >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (b >= 0xE0 && b <= 0xEF) {
        if (left < 3 || (p[2] & 0xC0) != 0x80) return 0;
        uint8_t lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        return (p[1] >= lo && p[1] <= hi) ? 3 : 0;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (left < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        uint8_t lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        return (p[1] >= lo && p[1] <= hi) ? 4 : 0;
    }
    return 0;
}

/* A string whose opening quote is at c->p. With out != NULL its decoded bytes are written
 * there (room for end - p bytes is guaranteed by the caller) and *n set. *esc: had escapes. */
static int string(Cur *c, uint8_t *out, size_t *n, int *esc) {
    const uint8_t *p = c->p + 1, *end = c->end;
    size_t w = 0;
    *esc = 0;
    for (;;) {
        const uint8_t *run = p;
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        for (;;) { /* 16 (SSE2), then 8 bytes at a time while that many are left in the line */
#if defined(__SSE2__)
            if (end - p >= 16) {
                unsigned m = special16(p);
                if (m) {
                    p += __builtin_ctz(m);
                    break;
                }
                p += 16;
                continue;
            }
#endif
            if (end - p < 8) {
                while (p < end && PLAIN[*p]) p++;
                break;
            }
            uint64_t t = special8(p);
            if (t) {
                p += __builtin_ctzll(t) >> 3;
                break;
            }
            p += 8;
        }
#else
        while (p < end && PLAIN[*p]) p++;
#endif
        if (out && p > run) {
            memcpy(out + w, run, (size_t)(p - run));
            w += (size_t)(p - run);
        }
        if (p >= end) return -1;
        uint8_t b = *p;
        if (b == '"') break;
        if (b == '\\') {
            *esc = 1;
            if (end - p < 2) return -1;
            uint8_t e = p[1], d;
            switch (e) {
            case '"': d = '"'; break;
            case '\\': d = '\\'; break;
            case '/': d = '/'; break;
            case 'b': d = '\b'; break;
            case 'f': d = '\f'; break;
            case 'n': d = '\n'; break;
            case 'r': d = '\r'; break;
            case 't': d = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (end - p < 6 || hex4(p + 2, &cp)) return -1;
                p += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return -1; /* lone low surrogate */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo)) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
                if (out) {
                    if (cp < 0x80) out[w++] = (uint8_t)cp;
                    else if (cp < 0x800) {
                        out[w++] = (uint8_t)(0xC0 | (cp >> 6));
                        out[w++] = (uint8_t)(0x80 | (cp & 0x3F));
                    } else if (cp < 0x10000) {
                        out[w++] = (uint8_t)(0xE0 | (cp >> 12));
                        out[w++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                        out[w++] = (uint8_t)(0x80 | (cp & 0x3F));
                    } else {
                        out[w++] = (uint8_t)(0xF0 | (cp >> 18));
                        out[w++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
                        out[w++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                        out[w++] = (uint8_t)(0x80 | (cp & 0x3F));
                    }
                }
                continue;
            }
            default: return -1;
            }
            if (out) out[w++] = d;
            p += 2;
            continue;
        }
        if (b < 0x20) return -1; /* a control character */
        int k = utf8_len(p, end);
        if (!k) return -1;
        if (out) {
            memcpy(out + w, p, (size_t)k);
            w += (size_t)k;
        }
        p += k;
    }
    c->p = p + 1;
    if (n) *n = w;
    return 0;
}

/* A string at c->p (its opening quote) of plain bytes only, skipped: 1; otherwise 0 with
 * c->p unmoved (string() then reads it, escapes and UTF-8 included). */
static inline int plain_string(Cur *c) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint8_t *p = c->p + 1, *end = c->end;
#if defined(__SSE2__)
    while (end - p >= 16) {
        unsigned m = special16(p);
        if (m) {
            p += __builtin_ctz(m);
            if (*p != '"') return 0;
            c->p = p + 1;
            return 1;
        }
        p += 16;
    }
#endif
    while (end - p >= 8) {
        uint64_t t = special8(p);
        if (t) {
            p += __builtin_ctzll(t) >> 3;
            if (*p != '"') return 0;
            c->p = p + 1;
            return 1;
        }
        p += 8;
    }
#endif
    (void)c;
    return 0;
}

/* A number at c->p. With kind != NULL, its value: K_INT (int64), K_FLOAT (exact), or
 * K_FLOAT_TEXT; returns -1 for invalid syntax or anything left to the row parser. */
static int number(Cur *c, uint8_t *kind, int64_t *val) {
    const uint8_t *s = c->p, *p = c->p, *end = c->end;
    int neg = 0, digits = 0, frac = 0, sig = 0, exp_digits = 0, exp_neg = 0, is_float = 0;
    uint64_t m = 0;
    int exp = 0;
    if (p < end && *p == '-') neg = 1, p++;
    if (p >= end) return -1;
    if (*p == '0') p++, digits = 1;
    else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) m = m * 10 + (uint64_t)(*p - '0');
            digits++, p++;
        }
        sig = digits;
    } else return -1;
    if (p < end && *p == '.') {
        is_float = 1;
        p++;
        const uint8_t *f = p;
        while (p < end && *p >= '0' && *p <= '9') {
            if (sig || *p != '0') {
                if (sig < 19) m = m * 10 + (uint64_t)(*p - '0');
                sig++;
            }
            p++;
        }
        frac = (int)(p - f);
        if (!frac) return -1;
    }
    if (p < end && (*p | 32) == 'e') {
        is_float = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) exp_neg = *p == '-', p++;
        while (p < end && *p >= '0' && *p <= '9') {
            exp = exp * 10 + (*p - '0');
            exp_digits++, p++;
            if (exp_digits > 2) return -1; /* orjson may overflow: the row parser decides */
        }
        if (!exp_digits) return -1;
    }
    c->p = p;
    if (digits + frac > MAX_DIGITS) return -1;
    if (!is_float) {
        if (digits > 19) return -1; /* a float or an overflow to orjson */
        if (!kind) return 0;
        if (neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX) return -1;
        *kind = K_INT;
        *val = neg ? (int64_t)(0 - m) : (int64_t)m;
        return 0;
    }
    if (!kind) return 0;
    int e10 = (exp_neg ? -exp : exp) - frac;
    if (sig <= 19 && m <= ((uint64_t)1 << 53) && e10 >= -22 && e10 <= 22) {
        /* Clinger: m (all its digits read) and 10**|e10| are exact doubles, one rounding */
        double d = (double)m;
        d = e10 < 0 ? d / POW10[-e10] : d * POW10[e10];
        if (neg) d = -d;
        *kind = K_FLOAT;
        memcpy(val, &d, sizeof d);
        return 0;
    }
    if (sig == 0) { /* zero, whatever the exponent */
        double d = neg ? -0.0 : 0.0;
        *kind = K_FLOAT;
        memcpy(val, &d, sizeof d);
        return 0;
    }
#ifdef __GLIBC__
    if (C_LOCALE && p - s < 256) { /* glibc's strtod is correctly rounded, as orjson */
        char text[256];
        memcpy(text, s, (size_t)(p - s));
        text[p - s] = 0;
        char *stop;
        double d = strtod_l(text, &stop, C_LOCALE);
        if (stop == text + (p - s) && d - d == 0) { /* all of it read, finite */
            *kind = K_FLOAT;
            memcpy(val, &d, sizeof d);
            return 0;
        }
    }
#endif
    if (p - s >= (1 << TEXT_BITS)) return -1;
    *kind = K_FLOAT_TEXT;
    *val = ((int64_t)(s - c->base) << TEXT_BITS) | (int64_t)(p - s);
    return 0;
}

static int literal(Cur *c, uint8_t *kind) {
    Py_ssize_t left = c->end - c->p;
    if (left >= 4 && !memcmp(c->p, "null", 4)) {
        if (kind) *kind = K_NULL;
        c->p += 4;
    } else if (left >= 4 && !memcmp(c->p, "true", 4)) {
        if (kind) *kind = K_TRUE;
        c->p += 4;
    } else if (left >= 5 && !memcmp(c->p, "false", 5)) {
        if (kind) *kind = K_FALSE;
        c->p += 5;
    } else return -1;
    return 0;
}

/* Skip (validating) one value at c->p inside the top-level object (depth 1). */
/* An object member's key, its colon and the whitespace after: the key skipped (validated),
 * c->p left at the value. -1 when it is not that. */
static int member_key(Cur *c) {
    int esc;
    if (c->p >= c->end || *c->p != '"' || string(c, NULL, NULL, &esc)) return -1;
    ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    ws(c);
    return 0;
}

static int skip_value(Cur *c) {
    uint8_t stack[MAX_DEPTH]; /* open containers below the top-level object */
    int sp = 0, esc;
    for (;;) {
        /* a value starts at c->p (whitespace skipped) */
        if (c->p >= c->end) return -1;
        uint8_t b = *c->p;
        if (b == '{' || b == '[') {
            if (sp + 2 > MAX_DEPTH) return -1; /* + the top-level object */
            stack[sp++] = b;
            c->p++;
            ws(c);
            if (c->p < c->end && *c->p == (b == '{' ? '}' : ']')) {
                c->p++;
                sp--;
            } else {
                if (b == '{' && member_key(c)) return -1;
                continue;
            }
        } else if (b == '"') {
            if (string(c, NULL, NULL, &esc)) return -1;
        } else if (b == '-' || (b >= '0' && b <= '9')) {
            if (number(c, NULL, NULL)) return -1;
        } else if (literal(c, NULL)) return -1;
        /* after a value: close containers, or go on to the next value */
        for (;;) {
            if (!sp) return 0;
            ws(c);
            if (c->p >= c->end) return -1;
            uint8_t t = stack[sp - 1];
            if (*c->p == ',') {
                c->p++;
                ws(c);
                if (t == '{' && member_key(c)) return -1;
                break;
            }
            if (*c->p != (t == '{' ? '}' : ']')) return -1;
            c->p++;
            sp--;
        }
    }
}

static int grow(Field *f, size_t need) {
    if (f->cap - f->pos >= need) return 0;
    if (need > (size_t)INT32_MAX - f->pos) return -1; /* Arrow's int32 offsets */
    size_t cap = f->cap ? f->cap : 4096;
    while (cap - f->pos < need) cap *= 2;
    uint8_t *s = PyMem_RawRealloc(f->str, cap);
    if (!s) return -1;
    f->str = s;
    f->cap = cap;
    return 0;
}

/* A projected key's value at c->p, into field f at line i. */
static int field_value(Cur *c, Field *f, Py_ssize_t i) {
    uint8_t b = *c->p;
    int esc;
    if (b == '"') {
        size_t n = 0;
        if (grow(f, (size_t)(c->end - c->p))) {
            c->oom = 1;
            return -1;
        }
        if (string(c, f->str + f->pos, &n, &esc)) return -1;
        f->pos += n;
        f->kind[i] = K_STR;
        return 0;
    }
    if (b == '-' || (b >= '0' && b <= '9')) return number(c, &f->kind[i], &f->val[i]);
    if (b == '{' || b == '[') {
        f->kind[i] = K_NESTED;
        return skip_value(c);
    }
    return literal(c, &f->kind[i]);
}

static inline int low_bit(uint64_t x) { /* x != 0 */
#if defined(__GNUC__)
    return __builtin_ctzll(x);
#else
    int k = 0;
    while (!(x & 1)) x >>= 1, k++;
    return k;
#endif
}

/* The projected keys by first byte: bit k of first[b] is set when key k starts with b
 * (empty: the empty key), so a key of the line is compared only with those (most keys of a
 * line are not projected: one lookup). */
typedef struct {
    uint64_t first[256];
    uint64_t empty;
} KeyIndex;

static int line(Cur *c, Field *fs, const KeyIndex *keys, Py_ssize_t i) {
    uint64_t seen = 0;
    int esc;
    ws(c);
    if (c->p >= c->end || *c->p != '{') return -1;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            if (c->p >= c->end || *c->p != '"') return -1;
            const uint8_t *key = c->p + 1;
            esc = 0;
            if (!plain_string(c) && string(c, NULL, NULL, &esc)) return -1;
            Py_ssize_t klen = (c->p - 1) - key;
            ws(c);
            if (c->p >= c->end || *c->p != ':') return -1;
            c->p++;
            ws(c);
            if (c->p >= c->end) return -1;
            if (esc) return -1; /* an escaped key may spell a projected one: row parser */
            int hit = -1;
            for (uint64_t cand = klen ? keys->first[key[0]] : keys->empty; cand;
                 cand &= cand - 1) {
                int k = low_bit(cand);
                if (fs[k].len == klen && !memcmp(fs[k].name, key, (size_t)klen)) {
                    hit = k;
                    break;
                }
            }
            if (hit >= 0) {
                if (seen & ((uint64_t)1 << hit)) return -1; /* given twice: row parser */
                seen |= (uint64_t)1 << hit;
                if (field_value(c, &fs[hit], i)) return -1;
            } else if (!(*c->p == '"' && plain_string(c)) && skip_value(c)) return -1;
            ws(c);
            if (c->p >= c->end) return -1;
            if (*c->p == ',') {
                c->p++;
                ws(c);
                continue;
            }
            if (*c->p != '}') return -1;
            c->p++;
            break;
        }
    }
    ws(c);
    return c->p == c->end ? 0 : -1;
}

typedef struct {
    Py_buffer b;
    int held;
} Buf;

static int get(PyObject *o, Buf *b, int writable, Py_ssize_t need, const char *what) {
    if (PyObject_GetBuffer(o, &b->b, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                              : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    b->held = 1;
    if (b->b.len < need) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need %zd", what, b->b.len, need);
        return -1;
    }
    return 0;
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *chunk_o, *starts_o, *ends_o, *names, *kinds_o, *vals_o, *offs_o, *status_o;
    if (!PyArg_ParseTuple(args, "OOOO!OOOO", &chunk_o, &starts_o, &ends_o, &PyTuple_Type, &names,
                          &kinds_o, &vals_o, &offs_o, &status_o))
        return NULL;
    Buf chunk = {0}, starts = {0}, ends = {0}, kinds = {0}, vals = {0}, offs = {0}, status = {0};
    Field fs[MAX_FIELDS];
    PyObject *result = NULL;
    int nf = (int)PyTuple_GET_SIZE(names), oom = 0;
    memset(fs, 0, sizeof fs);
    if (nf > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "too many fields");
        return NULL;
    }
    if (get(chunk_o, &chunk, 0, 0, "chunk") || get(starts_o, &starts, 0, 0, "starts") ||
        get(ends_o, &ends, 0, 0, "ends"))
        goto done;
    Py_ssize_t n = starts.b.len / 8;
    if (ends.b.len != starts.b.len || starts.b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "starts and ends: int64, one per line each");
        goto done;
    }
    if (get(kinds_o, &kinds, 1, nf * n, "kinds") || get(vals_o, &vals, 1, nf * n * 8, "vals") ||
        get(offs_o, &offs, 1, nf * (n + 1) * 4, "offs") || get(status_o, &status, 1, n, "status"))
        goto done;
    const int64_t *st = starts.b.buf, *en = ends.b.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || st[i] > en[i] || en[i] > chunk.b.len) {
            PyErr_SetString(PyExc_ValueError, "line bounds outside the chunk");
            goto done;
        }
    }
    if (chunk.b.len >= ((Py_ssize_t)1 << 31) || chunk.b.len >= ((Py_ssize_t)1 << (63 - TEXT_BITS))) {
        PyErr_SetString(PyExc_ValueError, "chunk too large");
        goto done;
    }
    for (int k = 0; k < nf; k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "names must be bytes");
            goto done;
        }
        fs[k].name = (const uint8_t *)PyBytes_AS_STRING(name);
        fs[k].len = PyBytes_GET_SIZE(name);
        fs[k].kind = (uint8_t *)kinds.b.buf + k * n;
        fs[k].val = (int64_t *)vals.b.buf + k * n;
        fs[k].off = (int32_t *)offs.b.buf + k * (n + 1);
        fs[k].off[0] = 0;
    }
    KeyIndex keys;
    memset(&keys, 0, sizeof keys);
    for (int k = 0; k < nf; k++) {
        if (fs[k].len) keys.first[fs[k].name[0]] |= (uint64_t)1 << k;
        else keys.empty |= (uint64_t)1 << k;
    }
    uint8_t *stat = status.b.buf;
    const uint8_t *base = chunk.b.buf;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n && !oom; i++) {
        size_t mark[MAX_FIELDS];
        for (int k = 0; k < nf; k++) {
            fs[k].kind[i] = K_MISSING;
            fs[k].val[i] = 0;
            mark[k] = fs[k].pos;
        }
        Cur c = {base, base + st[i], base + en[i], 0};
        int bad = line(&c, fs, &keys, i);
        oom = c.oom;
        stat[i] = bad ? 1 : 0;
        for (int k = 0; k < nf; k++) {
            if (bad) {
                fs[k].kind[i] = K_MISSING;
                fs[k].pos = mark[k];
            }
            fs[k].off[i + 1] = (int32_t)fs[k].pos;
        }
    }
    Py_END_ALLOW_THREADS;
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyList_New(nf);
    for (int k = 0; result && k < nf; k++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)fs[k].str, (Py_ssize_t)fs[k].pos);
        if (!b) Py_CLEAR(result);
        else PyList_SET_ITEM(result, k, b);
    }
done:
    for (int k = 0; k < nf; k++) PyMem_RawFree(fs[k].str);
    Buf *all[] = {&chunk, &starts, &ends, &kinds, &vals, &offs, &status};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        if (all[k]->held) PyBuffer_Release(&all[k]->b);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS, "Scan JSON lines into typed columns (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "json_scan_c",
                                    "Strict JSON-lines scanner for the projected JSON kernel.", -1,
                                    METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_json_scan_c(void) {
#ifdef __GLIBC__
    if (!C_LOCALE) C_LOCALE = newlocale(LC_ALL_MASK, "C", (locale_t)0);
#endif
    for (int b = 0x20; b < 0x80; b++) PLAIN[b] = b != '"' && b != '\\';
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) ||
        PyModule_AddIntConstant(m, "TEXT_BITS", TEXT_BITS)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
