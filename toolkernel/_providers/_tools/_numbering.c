/* read_file's numbering in C: `cat -n` prefixes laid before each line of a window, with no
 * Python object made per line.
 *
 * number(data: bytes, offset: int, limit: int, max_line: int) -> (str | bytes, int, int) | None
 *
 * The lines of `data` end at each "\n" (the last one may have none). Of lines[offset:offset+limit]
 * it gives each line after its prefix ("%6d\t" % its number, counted from 1), the window's last
 * newline left off and, when the window starts at the first line, a UTF-8 byte order mark too;
 * then the count of the window's lines and of all of them. The numbered window is a str when it
 * is ASCII (no decode, and no second copy, follows), else bytes, which the caller decodes (a
 * window next to a byte past ASCII may come as bytes too). None when a line of the window
 * (without its newline) is longer than `max_line` bytes: the line-by-line reader cuts those.
 *
 * A window from the first line (the common read: the whole of a file) is written in one pass
 * as its lines are found, into room for the most it can take; any other is measured first.
 *
 * It is only faster than `_numbered_text_in_python` in files.py, which gives the same for every
 * input (tests/_tools/test_tools_read_numbering.py compares the two on generated files).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define BOM "\xef\xbb\xbf"
#define BOM_SIZE 3
#define NUMBER_PLACES 6
#define MAX_PREFIX 24 /* the digits of any Py_ssize_t, and a tab */
/* Above this many bytes the scan lets other threads run: a 4 MB file takes a millisecond or two. */
#define WITHOUT_THE_GIL_ABOVE 65536

/* Made part of the loop that calls it: called apart, the copy of a line spent a third of its time
 * on the call (registers saved and loaded again). */
#if defined(__GNUC__)
#define IN_LOOP static inline __attribute__((always_inline))
#else
#define IN_LOOP static inline
#endif

#define WRITTEN 0
#define MEASURED_WRONG -1
#define TOO_LONG 1

/* The prefix of the line being written, counted up in place: a division per digit for each
 * line cost a window of 2,000 lines a third of its time. The digits end at text[DIGITS_END - 1],
 * the tab is at text[DIGITS_END], and spaces lie before the digits. */
#define DIGITS_END (MAX_PREFIX + NUMBER_PLACES)
typedef struct {
    char text[DIGITS_END + 1];
    Py_ssize_t digits;
} Prefix;

static void prefix_start(Prefix *x, Py_ssize_t number) {
    memset(x->text, ' ', DIGITS_END);
    x->text[DIGITS_END] = '\t';
    x->digits = 0;
    char *at = x->text + DIGITS_END;
    do {
        *--at = (char)('0' + number % 10);
        number /= 10;
        x->digits++;
    } while (number);
}

IN_LOOP void prefix_next(Prefix *x) {
    char *at = x->text + DIGITS_END - 1;
    while (*at == '9')
        *at-- = '0';
    if (*at == ' ')
        x->digits++; /* one digit more: the space before the number becomes its first digit */
    *at = *at == ' ' ? '1' : (char)(*at + 1);
}

IN_LOOP Py_ssize_t prefix_width(const Prefix *x) {
    return (x->digits < NUMBER_PLACES ? NUMBER_PLACES : x->digits) + 1;
}

/* The prefix written at *w, which moves past it, if `room` bytes hold it and the `rest` of the
 * window's bytes after it (what a copy needs: see copy_line); the next line's prefix made. */
IN_LOOP int prefix_write(Prefix *x, char **w, Py_ssize_t room, Py_ssize_t rest) {
    Py_ssize_t width = prefix_width(x);
    if (room < width + rest)
        return MEASURED_WRONG;
    memcpy(*w, x->text + DIGITS_END + 1 - width, (size_t)width);
    *w += width;
    prefix_next(x);
    return WRITTEN;
}

/* The bytes the prefixes of lines `first` to `last` take: the numbers of each count of digits
 * (1-9, 10-99, ...) at once. */
static Py_ssize_t prefixes_size(Py_ssize_t first, Py_ssize_t last) {
    Py_ssize_t size = 0, band_end = 9, digits = 1;
    while (first <= last) {
        if (first <= band_end) {
            Py_ssize_t upto = last < band_end ? last : band_end;
            size += (upto - first + 1) * ((digits < NUMBER_PLACES ? NUMBER_PLACES : digits) + 1);
            first = upto + 1;
        }
        if (band_end > PY_SSIZE_T_MAX / 10)
            break; /* the last band: it holds every number left */
        band_end = band_end * 10 + 9;
        digits++;
    }
    return size;
}

#if defined(__SSE2__)
#include <emmintrin.h>
#define BLOCK 16
#define STEP (4 * BLOCK)

static Py_ssize_t lanes_sum(__m128i lanes) {
    __m128i sums = _mm_sad_epu8(lanes, _mm_setzero_si128()); /* two sums, in 64-bit halves */
    return _mm_cvtsi128_si32(sums) + _mm_extract_epi16(sums, 4);
}

/* The newlines in [p, p + n), and in *high whether a byte of it is not ASCII (every x86-64 has
 * SSE2): 64 bytes a step in four blocks, each counted in its own byte lanes for up to 255 steps,
 * then summed; the plain loop's compiled code widened each byte to an int and took ten times as
 * long, one block a step two and a half. */
static Py_ssize_t count_newlines(const char *p, Py_ssize_t n, int *high) {
    const __m128i newline = _mm_set1_epi8('\n');
    __m128i seen = _mm_setzero_si128(); /* every block OR-ed: a top bit set is a byte past ASCII */
    Py_ssize_t count = 0;
    while (n >= STEP) {
        Py_ssize_t steps = n / STEP < 255 ? n / STEP : 255;
        __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
        for (Py_ssize_t i = 0; i < steps; i++, p += STEP) { /* a match is -1: subtracting it adds one */
            __m128i w = _mm_loadu_si128((const __m128i *)p), x = _mm_loadu_si128((const __m128i *)(p + 16));
            __m128i y = _mm_loadu_si128((const __m128i *)(p + 32)), z = _mm_loadu_si128((const __m128i *)(p + 48));
            seen = _mm_or_si128(seen, _mm_or_si128(_mm_or_si128(w, x), _mm_or_si128(y, z)));
            a = _mm_sub_epi8(a, _mm_cmpeq_epi8(w, newline));
            b = _mm_sub_epi8(b, _mm_cmpeq_epi8(x, newline));
            c = _mm_sub_epi8(c, _mm_cmpeq_epi8(y, newline));
            d = _mm_sub_epi8(d, _mm_cmpeq_epi8(z, newline));
        }
        count += lanes_sum(a) + lanes_sum(b) + lanes_sum(c) + lanes_sum(d);
        n -= steps * STEP;
    }
    int top = _mm_movemask_epi8(seen);
    for (; n > 0; n--, p++) {
        count += *p == '\n';
        top |= *p & 0x80;
    }
    *high = top != 0;
    return count;
}

/* A line from `p` up to and including its newline copied to *w (which moves past it), 16 bytes
 * a step where at least 16 are left before `last`: each step stores all 16 (the room after *w is
 * never less than what is left before `last`), and what lies past the newline is written over
 * next. Gives the byte after the line; *newline is its newline, or NULL for a line `last` ends.
 * *high gets a top bit for a byte past ASCII among those read (some past the line, maybe). */
IN_LOOP const char *copy_line(const char *p, const char *last, char **w, const char **newline, int *high) {
    const __m128i newlines = _mm_set1_epi8('\n');
    char *out = *w;
    __m128i seen = _mm_setzero_si128();
    while (last - p >= BLOCK) {
        __m128i block = _mm_loadu_si128((const __m128i *)p);
        _mm_storeu_si128((__m128i *)out, block);
        seen = _mm_or_si128(seen, block);
        int found = _mm_movemask_epi8(_mm_cmpeq_epi8(block, newlines));
        if (found) {
            int past = __builtin_ctz((unsigned int)found) + 1;
            *high |= _mm_movemask_epi8(seen);
            *newline = p + past - 1;
            *w = out + past;
            return p + past;
        }
        p += BLOCK;
        out += BLOCK;
    }
    const char *at = memchr(p, '\n', (size_t)(last - p));
    const char *next = at ? at + 1 : last;
    int top = _mm_movemask_epi8(seen);
    for (const char *q = p; q < next; q++)
        top |= *q & 0x80;
    *high |= top;
    memcpy(out, p, (size_t)(next - p));
    *w = out + (next - p);
    *newline = at;
    return next;
}
#else
static Py_ssize_t count_newlines(const char *p, Py_ssize_t n, int *high) {
    Py_ssize_t count = 0;
    int top = 0;
    while (n > 0) {
        Py_ssize_t block = n < 4096 ? n : 4096;
        unsigned int in_block = 0;
        for (Py_ssize_t i = 0; i < block; i++) {
            in_block += p[i] == '\n';
            top |= p[i] & 0x80;
        }
        count += in_block;
        p += block;
        n -= block;
    }
    *high = top != 0;
    return count;
}

IN_LOOP const char *copy_line(const char *p, const char *last, char **w, const char **newline, int *high) {
    const char *at = memchr(p, '\n', (size_t)(last - p));
    const char *next = at ? at + 1 : last;
    for (const char *q = p; q < next; q++)
        *high |= *q & 0x80;
    memcpy(*w, p, (size_t)(next - p));
    *w += next - p;
    *newline = at;
    return next;
}
#endif

/* The lines in [p, end), only counted. */
static Py_ssize_t lines_in(const char *p, const char *end) {
    int high;
    return count_newlines(p, end - p, &high) + (p < end && end[-1] != '\n');
}

static int starts_with_bom(const char *data, const char *end) {
    return end - data >= BOM_SIZE && memcmp(data, BOM, BOM_SIZE) == 0;
}

/* A window of the lines in [data, end) and where it is written. */
typedef struct {
    const char *data, *end;
    Py_ssize_t offset, stop, max_line;
    Py_ssize_t count, total, size; /* lines in the window, lines in all, bytes written */
    int high;                      /* a byte past ASCII was met: the window is decoded as UTF-8 */
} Window;

/* -- a window from the first line: written as its lines are found ---------------------------- */

/* The most bytes the numbered window from the first line can take: a file of n bytes has at
 * most n lines. */
static Py_ssize_t room_from_start(const Window *s) {
    Py_ssize_t length = s->end - s->data;
    return length + prefixes_size(1, s->stop < length ? s->stop : length);
}

/* The window written at `out` (room for `room` bytes), its lines measured as they are copied:
 * WRITTEN, TOO_LONG, or MEASURED_WRONG (a fault of the room: never written past). */
static int write_from_start(Window *s, char *out, Py_ssize_t room) {
    /* Locals, not the fields of `s`: a store of a char may change any of those, so the compiled
     * loop would load them again after every store (and took twice as long). */
    const char *end = s->end, *line = s->data;
    const char *p = line + (starts_with_bom(line, end) ? BOM_SIZE : 0), *newline = NULL;
    const Py_ssize_t stop = s->stop, max_line = s->max_line;
    Py_ssize_t count = 0;
    int high = 0;
    char *w = out, *room_end = out + room;
    Prefix prefix;
    prefix_start(&prefix, 1);
    while (line < end && count < stop) {
        if (prefix_write(&prefix, &w, room_end - w, end - p) != WRITTEN)
            return MEASURED_WRONG;
        count++;
        p = copy_line(p, end, &w, &newline, &high);
        if ((newline ? newline : p) - line > max_line) /* the first line counts a byte order mark, as the reader does */
            return TOO_LONG;
        line = p;
        if (newline == NULL)
            break;
    }
    if (newline != NULL)
        w--; /* the window's last newline */
    s->count = count;
    s->total = count + lines_in(line, end);
    s->size = w - out;
    s->high = high;
    return WRITTEN;
}

/* -- any other window: measured first, then written ------------------------------------------- */

typedef struct {
    const char *first, *last; /* the window's bytes: [first, last) */
    int too_long;
} Span;

/* A step per line up to the window's end, then a count of the rest. */
static void measure(Window *s, Span *span) {
    const char *p = s->data;
    Py_ssize_t index = 0;
    while (p < s->end) {
        if (index >= s->stop) {
            index += lines_in(p, s->end);
            break;
        }
        const char *newline = memchr(p, '\n', (size_t)(s->end - p));
        const char *next = newline ? newline + 1 : s->end;
        if (index >= s->offset) {
            if ((newline ? newline : s->end) - p > s->max_line) {
                span->too_long = 1;
                return;
            }
            if (span->first == NULL)
                span->first = p;
            span->last = next;
            s->count++;
            /* at most a line's bytes and a prefix: no overflow before memory runs out */
            s->size += (next - p) + prefixes_size(index + 1, index + 1);
        }
        index++;
        p = next;
    }
    s->total = index;
    if (s->count == 0)
        return;
    if (span->last[-1] == '\n') {
        span->last--;
        s->size--;
    }
    count_newlines(span->first, span->last - span->first, &s->high);
}

/* The measured window written at `out`, which has room for its `size` bytes. */
static int write_span(const Window *s, const Span *span, char *out) {
    char *w = out, *room_end = out + s->size;
    const char *p = span->first, *newline;
    int high = 0;
    Prefix prefix;
    prefix_start(&prefix, s->offset + 1);
    for (;;) {
        if (prefix_write(&prefix, &w, room_end - w, span->last - p) != WRITTEN)
            return MEASURED_WRONG;
        p = copy_line(p, span->last, &w, &newline, &high);
        if (newline == NULL)
            break;
    }
    return w == room_end ? WRITTEN : MEASURED_WRONG;
}

/* -- the module ------------------------------------------------------------------------------- */

/* A str of `size` bytes to write into (its bytes must be ASCII by the time anyone sees it). */
static PyObject *room_for(Py_ssize_t size, char **out) {
    PyObject *text = PyUnicode_New(size, 127);
    if (text != NULL)
        *out = (char *)PyUnicode_1BYTE_DATA(text);
    return text;
}

/* What was written into `text` (of `room` bytes), as the window's object: the str cut to its
 * size, or bytes of a window with a byte past ASCII. */
static PyObject *as_made(PyObject *text, const char *out, const Window *s, Py_ssize_t room) {
    if (s->high) {
        PyObject *bytes = PyBytes_FromStringAndSize(out, s->size);
        Py_DECREF(text);
        return bytes;
    }
    if (s->size != room && PyUnicode_Resize(&text, s->size) < 0)
        return NULL; /* PyUnicode_Resize let it go */
    return text;
}

/* The window written at `out`: from the first line, or the measured `span`. */
static int write_window(Window *s, const Span *span, char *out, Py_ssize_t room) {
    return span == NULL ? write_from_start(s, out, room) : write_span(s, span, out);
}

static PyObject *number(PyObject *module, PyObject *args) {
    PyObject *bytes;
    Py_ssize_t offset, limit, max_line;
    if (!PyArg_ParseTuple(args, "Snnn:number", &bytes, &offset, &limit, &max_line))
        return NULL;
    if (offset < 0 || limit < 1 || max_line < 0) {
        PyErr_SetString(PyExc_ValueError, "offset must be >= 0, limit >= 1 and max_line >= 0");
        return NULL;
    }
    Window s = {0};
    s.data = PyBytes_AS_STRING(bytes); /* bytes do not change: safe to read without the GIL */
    s.end = s.data + PyBytes_GET_SIZE(bytes);
    s.offset = offset;
    s.stop = limit > PY_SSIZE_T_MAX - offset ? PY_SSIZE_T_MAX : offset + limit;
    s.max_line = max_line;
    int quiet = PyBytes_GET_SIZE(bytes) > WITHOUT_THE_GIL_ABOVE;

    Span span = {0};
    Py_ssize_t room;
    if (offset == 0) {
        room = room_from_start(&s);
    } else {
        if (quiet) {
            Py_BEGIN_ALLOW_THREADS
            measure(&s, &span);
            Py_END_ALLOW_THREADS
        } else {
            measure(&s, &span);
        }
        if (span.too_long)
            Py_RETURN_NONE;
        room = s.count ? s.size : 0;
    }
    char *out = NULL;
    PyObject *text = room_for(room, &out); /* nobody else holds it yet */
    if (text == NULL)
        return NULL;
    int written = WRITTEN;
    if (offset == 0 || s.count) {
        const Span *measured = offset == 0 ? NULL : &span;
        if (quiet) {
            Py_BEGIN_ALLOW_THREADS
            written = write_window(&s, measured, out, room);
            Py_END_ALLOW_THREADS
        } else {
            written = write_window(&s, measured, out, room);
        }
    }
    if (written != WRITTEN) {
        Py_DECREF(text);
        if (written == TOO_LONG)
            Py_RETURN_NONE;
        PyErr_SetString(PyExc_SystemError, "read_file's numbering measured the window wrong");
        return NULL;
    }
    PyObject *numbered = as_made(text, out, &s, room);
    if (numbered == NULL)
        return NULL;
    return Py_BuildValue("(Nnn)", numbered, s.count, s.total);
}

static PyMethodDef methods[] = {
    {"number", number, METH_VARARGS, "Number a window of lines (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_numbering", "read_file's line numbering in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__numbering(void) { return PyModule_Create(&module); }
