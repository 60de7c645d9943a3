/* read_file's numbering in one C pass: `cat -n` prefixes laid before each line of a window,
 * with no Python object made per line.
 *
 * number(data: bytes, offset: int, limit: int, max_line: int) -> (bytes, int, int) | None
 *
 * The lines of `data` end at each "\n" (the last one may have none). Of lines[offset:offset+limit]
 * it gives each line after its prefix ("%6d\t" % its number, counted from 1), the window's last
 * newline left off and, when the window starts at the first line, a UTF-8 byte order mark too;
 * then the count of the window's lines and of all of them. None when a line of the window
 * (without its newline) is longer than `max_line` bytes: the line-by-line reader cuts those.
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

typedef struct {
    const char *data, *end;
    Py_ssize_t offset, stop, max_line;
    /* what the scan found */
    const char *first, *last;     /* the window's bytes: [first, last) */
    Py_ssize_t count, total, size; /* lines in it, lines in all, bytes the numbered window takes */
    int too_long;
} Scan;

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

static void prefix_next(Prefix *x) {
    char *at = x->text + DIGITS_END - 1;
    while (*at == '9')
        *at-- = '0';
    if (*at == ' ')
        x->digits++; /* one digit more: the space before the number becomes its first digit */
    *at = *at == ' ' ? '1' : (char)(*at + 1);
}

static Py_ssize_t prefix_width(const Prefix *x) {
    return (x->digits < NUMBER_PLACES ? NUMBER_PLACES : x->digits) + 1;
}

/* The newlines in [p, p + n). With SSE2 (every x86-64): 16 bytes a step, counted in byte lanes
 * for up to 255 steps, then summed; the plain loop's compiled code widened each byte to an int
 * and took three times as long. */
#if defined(__SSE2__)
#include <emmintrin.h>
static Py_ssize_t count_newlines(const char *p, Py_ssize_t n) {
    const __m128i newline = _mm_set1_epi8('\n');
    Py_ssize_t count = 0;
    while (n >= 16) {
        Py_ssize_t steps = n / 16 < 255 ? n / 16 : 255;
        __m128i lanes = _mm_setzero_si128();
        for (Py_ssize_t i = 0; i < steps; i++, p += 16) /* a match is -1: subtracting it adds one */
            lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), newline));
        __m128i sums = _mm_sad_epu8(lanes, _mm_setzero_si128()); /* two sums, in 64-bit halves */
        count += _mm_cvtsi128_si32(sums) + _mm_extract_epi16(sums, 4);
        n -= steps * 16;
    }
    for (; n > 0; n--)
        count += *p++ == '\n';
    return count;
}
#else
static Py_ssize_t count_newlines(const char *p, Py_ssize_t n) {
    Py_ssize_t count = 0;
    while (n > 0) {
        Py_ssize_t block = n < 4096 ? n : 4096;
        unsigned int in_block = 0;
        for (Py_ssize_t i = 0; i < block; i++)
            in_block += p[i] == '\n';
        count += in_block;
        p += block;
        n -= block;
    }
    return count;
}
#endif

/* The last newline in [p, p + n), or NULL. */
static const char *last_newline(const char *p, Py_ssize_t n) {
#if defined(__GLIBC__)
    return memrchr(p, '\n', (size_t)n);
#else
    for (const char *q = p + n; q > p;)
        if (*--q == '\n')
            return q;
    return NULL;
#endif
}

/* Whether a line in [p, end) holds more than `max_line` bytes before its newline, found with a
 * step per `max_line` bytes: from a line's start, the next `max_line` + 1 bytes hold a newline
 * unless that line is longer; the last newline among them is where the next look starts. */
static int has_long_line(const char *p, const char *end, Py_ssize_t max_line) {
    while (end - p > max_line) {
        const char *newline = last_newline(p, max_line + 1);
        if (newline == NULL)
            return 1;
        p = newline + 1;
    }
    return 0;
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

/* The lines after the window are only counted. */
static Py_ssize_t lines_in(const char *p, const char *end) {
    return count_newlines(p, end - p) + (p < end && end[-1] != '\n');
}

/* A window from the first line that takes the whole file: a count of the newlines, and the
 * look for a long line, with no step per line. 0 when the window is not the whole file. */
static int scan_whole(Scan *s) {
    Py_ssize_t length = s->end - s->data;
    Py_ssize_t total = lines_in(s->data, s->end);
    if (s->offset != 0 || total > s->stop)
        return 0;
    s->total = total;
    if (has_long_line(s->data, s->end, s->max_line)) {
        s->too_long = 1;
        return 1;
    }
    s->count = total;
    s->first = s->data;
    s->last = s->end;
    s->size = length + prefixes_size(1, total);
    return 1;
}

/* Any other window: a step per line up to its end, then a count of the rest. */
static void scan_lines(Scan *s) {
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
                s->too_long = 1;
                return;
            }
            if (s->first == NULL)
                s->first = p;
            s->last = next;
            s->count++;
            /* at most a line's bytes and a prefix: no overflow before memory runs out */
            s->size += (next - p) + prefixes_size(index + 1, index + 1);
        }
        index++;
        p = next;
    }
    s->total = index;
}

static void scan(Scan *s) {
    if (!scan_whole(s))
        scan_lines(s);
    if (s->too_long || s->count == 0)
        return;
    if (s->offset == 0 && s->end - s->data >= BOM_SIZE && memcmp(s->data, BOM, BOM_SIZE) == 0) {
        s->first += BOM_SIZE;
        s->size -= BOM_SIZE;
    }
    if (s->last > s->first && s->last[-1] == '\n') {
        s->last--;
        s->size--;
    }
}

/* The window numbered into `out`, which has room for `size` bytes; -1 if it would not fit
 * (a fault of the scan: never written past). */
static int write_window(const Scan *s, char *out) {
    char *w = out, *room_end = out + s->size;
    const char *p = s->first;
    Prefix prefix;
    prefix_start(&prefix, s->offset + 1);
    for (;;) {
        Py_ssize_t width = prefix_width(&prefix);
        if (room_end - w < width)
            return -1;
        memcpy(w, prefix.text + DIGITS_END + 1 - width, (size_t)width);
        w += width;
        prefix_next(&prefix);
        const char *newline = memchr(p, '\n', (size_t)(s->last - p));
        const char *next = newline ? newline + 1 : s->last;
        if (room_end - w < next - p)
            return -1;
        memcpy(w, p, (size_t)(next - p));
        w += next - p;
        p = next;
        if (newline == NULL)
            break;
    }
    return w == room_end ? 0 : -1;
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
    Scan s = {0};
    s.data = PyBytes_AS_STRING(bytes); /* bytes do not change: safe to read without the GIL */
    s.end = s.data + PyBytes_GET_SIZE(bytes);
    s.offset = offset;
    s.stop = limit > PY_SSIZE_T_MAX - offset ? PY_SSIZE_T_MAX : offset + limit;
    s.max_line = max_line;
    int quiet = PyBytes_GET_SIZE(bytes) > WITHOUT_THE_GIL_ABOVE;

    if (quiet) {
        Py_BEGIN_ALLOW_THREADS
        scan(&s);
        Py_END_ALLOW_THREADS
    } else {
        scan(&s);
    }
    if (s.too_long)
        Py_RETURN_NONE;
    PyObject *numbered = PyBytes_FromStringAndSize(NULL, s.count ? s.size : 0);
    if (numbered == NULL)
        return NULL;
    int written = 0;
    if (s.count) {
        char *out = PyBytes_AS_STRING(numbered); /* nobody else holds it yet */
        if (quiet) {
            Py_BEGIN_ALLOW_THREADS
            written = write_window(&s, out);
            Py_END_ALLOW_THREADS
        } else {
            written = write_window(&s, out);
        }
    }
    if (written != 0) {
        Py_DECREF(numbered);
        PyErr_SetString(PyExc_SystemError, "read_file's numbering measured the window wrong");
        return NULL;
    }
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
