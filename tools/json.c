// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The JSON writer behind the tools' --json output (json.h).
 */
#include "json.h"

#include <inttypes.h>
#include <math.h>

void json_init(struct json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->in_array[0] = false;
	j->has_items[0] = false;
}

static void put_escaped(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* The separator, the indentation of an array element, and the key. */
static void member(struct json *j, const char *key)
{
	unsigned int d = j->depth;

	if (j->has_items[d])
		fputc(',', j->f);
	if (j->in_array[d])
		fprintf(j->f, "\n%*s", 2 * d, "");
	else if (j->has_items[d])
		fputc(' ', j->f);
	j->has_items[d] = true;
	if (key) {
		put_escaped(j->f, key);
		fputs(": ", j->f);
	}
}

static void open_level(struct json *j, const char *key, char c, bool array)
{
	member(j, key);
	fputc(c, j->f);
	if (j->depth + 1 < JSON_MAX_DEPTH)
		j->depth++;
	j->in_array[j->depth] = array;
	j->has_items[j->depth] = false;
}

static void close_level(struct json *j, char c)
{
	bool newline = j->in_array[j->depth] && j->has_items[j->depth];

	if (j->depth)
		j->depth--;
	if (newline)
		fprintf(j->f, "\n%*s", 2 * j->depth, "");
	fputc(c, j->f);
}

void json_object_begin(struct json *j, const char *key)
{
	open_level(j, key, '{', false);
}

void json_object_end(struct json *j)
{
	close_level(j, '}');
}

void json_array_begin(struct json *j, const char *key)
{
	open_level(j, key, '[', true);
}

void json_array_end(struct json *j)
{
	close_level(j, ']');
}

void json_string(struct json *j, const char *key, const char *s)
{
	member(j, key);
	put_escaped(j->f, s ? s : "");
}

void json_double(struct json *j, const char *key, double v, int decimals)
{
	member(j, key);
	if (isfinite(v))
		fprintf(j->f, "%.*f", decimals, v);
	else
		fputs("null", j->f);
}

void json_u64(struct json *j, const char *key, uint64_t v)
{
	member(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void json_i64(struct json *j, const char *key, int64_t v)
{
	member(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void json_bool(struct json *j, const char *key, bool v)
{
	member(j, key);
	fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j, const char *key)
{
	member(j, key);
	fputs("null", j->f);
}

void json_finish(struct json *j)
{
	fputc('\n', j->f);
	fflush(j->f);
}
