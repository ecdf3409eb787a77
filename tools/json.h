/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The tools' --json output: a writer that emits values as they come and
 * keeps track of commas and nesting, so that each tool only says what it
 * prints.  Every element of an array starts on a line of its own (one
 * result per line, which line-oriented scripts rely on); objects stay on
 * one line.  Strings are escaped; a non-finite number prints as null.
 */
#ifndef TOOLS_JSON_H
#define TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH	8

struct json {
	FILE *f;
	unsigned int depth;
	bool in_array[JSON_MAX_DEPTH];
	bool has_items[JSON_MAX_DEPTH];
};

void json_init(struct json *j, FILE *f);
/* @key names the member inside an object; NULL at the top or in an array. */
void json_object_begin(struct json *j, const char *key);
void json_object_end(struct json *j);
void json_array_begin(struct json *j, const char *key);
void json_array_end(struct json *j);
void json_string(struct json *j, const char *key, const char *s);
void json_double(struct json *j, const char *key, double v, int decimals);
void json_u64(struct json *j, const char *key, uint64_t v);
void json_i64(struct json *j, const char *key, int64_t v);
void json_bool(struct json *j, const char *key, bool v);
void json_null(struct json *j, const char *key);
/* After the top-level value: a newline, and the stream flushed. */
void json_finish(struct json *j);

#endif
