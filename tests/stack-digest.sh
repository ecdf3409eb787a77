#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# One line from the gdb backtraces a hung test printed (tests/unit/tap.c's
# watchdog, tests/python/conftest.py's): each thread's six innermost named
# frames, innermost first ("a<b<c"; the interpreter's own are left out),
# threads apart by " | ", processes by " || ", cut to 900 characters.  tests/summary.sh puts it on the hung
# test's failure line, which a CI log's tail shows.
#
#   tests/stack-digest.sh LOG
set -euo pipefail

awk '
{
	sub(/\r$/, "")
	sub(/^(# )+/, "")
}
/^Thread [0-9]+ \(/ {
	flush()
	if (seen_attach) {
		out = out (out == "" ? "" : (new_proc ? " || " : " | "))
		new_proc = 0
	}
	in_thread = 1
	nframes = 0
	next
}
/Inferior 1 \(process [0-9]+\) detached/ { flush(); in_thread = 0; new_proc = 1; next }
/^\[Thread debugging using libthread_db/ { seen_attach = 1 }
in_thread && /^#[0-9]+ / {
	line = $0
	sub(/^#[0-9]+ +(0x[0-9a-f]+ in )?/, "", line)
	name = line
	sub(/ .*/, "", name)
	# Frames of the interpreter and of thread start-up say nothing.
	sub(/^_+/, "", name)
	sub(/^GI_+/, "", name)
	# The watchdog runs on the hung thread: what it interrupted is below it.
	if (name == "watchdog_fired") {
		frames = ""
		nframes = 0
		next
	}
	if (name == "??" || name == "<signal" || nframes >= 6 ||
	    name ~ /^(Py|cfunction_|method_vectorcall|slot_tp_|vectorcall_|builtin_|run_mod|run_eval|pymain_|start_thread|start$|clone3?$|libc_start|futex_|lll_)/)
		next
	frames = frames (nframes ? "<" : "") name
	nframes++
}
function flush() {
	if (frames != "")
		out = out frames
	frames = ""
}
END {
	flush()
	if (length(out) > 900)
		out = substr(out, 1, 900) "..."
	print out
}
' "$1"
