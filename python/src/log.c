// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The library's log lines, on their way to Python's logging.
 *
 * The library calls the handler on whichever thread logs, its context
 * threads included, where no Python may run: the handler only copies the
 * line onto a bounded list.  Python threads take the lines off it
 * (_log_take) and hand them to logging.getLogger("tpu_user").
 */
#include <stdlib.h>
#include <string.h>
#include "tpupy.h"

#define LOG_MAX_LINES	4096

struct log_line {
	struct log_line *next;
	char text[];
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_line *log_head, *log_tail;
static unsigned int log_count, log_dropped;

static void on_line(void *arg, const char *line)
{
	size_t len = strlen(line);
	struct log_line *l;

	(void)arg;
	pthread_mutex_lock(&log_lock);
	if (log_count >= LOG_MAX_LINES) {
		log_dropped++;
		goto out;
	}
	l = malloc(sizeof(*l) + len + 1);
	if (!l) {
		log_dropped++;
		goto out;
	}
	memcpy(l->text, line, len + 1);
	l->next = NULL;
	if (log_tail)
		log_tail->next = l;
	else
		log_head = l;
	log_tail = l;
	log_count++;
out:
	pthread_mutex_unlock(&log_lock);
}

PyObject *tpupy_log_capture(PyObject *self, PyObject *args)
{
	int enable = 1, debug = 1;

	(void)self;
	if (!PyArg_ParseTuple(args, "|pp:_log_capture", &enable, &debug))
		return NULL;
	tpu_log_set_handler(enable ? on_line : NULL, NULL, enable && debug);
	Py_RETURN_NONE;
}

PyObject *tpupy_log_take(PyObject *self, PyObject *unused)
{
	struct log_line *l, *next;
	unsigned int dropped;
	PyObject *list = PyList_New(0);

	(void)self;
	(void)unused;
	if (!list)
		return NULL;
	pthread_mutex_lock(&log_lock);
	l = log_head;
	log_head = log_tail = NULL;
	log_count = 0;
	dropped = log_dropped;
	log_dropped = 0;
	pthread_mutex_unlock(&log_lock);
	for (; l; l = next) {
		PyObject *s = PyUnicode_DecodeUTF8(l->text, (Py_ssize_t)strlen(l->text), "replace");

		next = l->next;
		free(l);
		if (!s || PyList_Append(list, s) < 0)
			PyErr_Clear();
		Py_XDECREF(s);
	}
	if (dropped) {
		PyObject *s = PyUnicode_FromFormat("(%u log lines dropped: nobody took them)",
						   dropped);

		if (!s || PyList_Append(list, s) < 0)
			PyErr_Clear();
		Py_XDECREF(s);
	}
	return list;
}
