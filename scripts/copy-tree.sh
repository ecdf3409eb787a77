#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Copy this source tree, without build output, to DEST: the files git tracks
# or would track (untracked files that no .gitignore matches), as they are in
# the working tree, uncommitted changes included.  Outside a git checkout,
# everything but .git and build/.  Package builds and packaging checks run in
# such a copy, so that they leave nothing behind in the tree.
#
#   scripts/copy-tree.sh DEST     DEST must not exist or be empty
set -euo pipefail

dest=${1:?usage: copy-tree.sh DEST}
top=$(cd "$(dirname "$0")/.." && pwd)

if [ -e "$dest" ] && [ -n "$(ls -A "$dest")" ]; then
	echo "copy-tree: $dest is not empty" >&2
	exit 1
fi
mkdir -p "$dest"

cd "$top"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# A tracked file deleted in the working tree is not copied.
	git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do
			if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
		done |
		tar --null --no-recursion -T - -cf - | tar -C "$dest" -xf -
else
	tar --exclude=./.git --exclude=./build -cf - . | tar -C "$dest" -xf -
fi
