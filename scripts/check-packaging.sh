#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Packaging checks, printing TAP ("ok N - ...", the plan "1..N" last, then a
# "# N passed, N failed" line); the exit status is 0 only if all pass.
#
#   - the DKMS tree (make -C packaging install, what make dkms-install and
#     tensorpipe-dkms install) builds with dkms for every installed kernel
#     that has a build tree, in private dkms trees (--dkmstree, --sourcetree,
#     --installtree and a throw-away signing key), and each module's
#     vermagic names its kernel;
#   - make install with PREFIX=/usr and PREFIX=/usr/local into a DESTDIR:
#     the files, the pkg-config file, examples/rendezvous_hello.c compiled
#     and run against the installed library; make uninstall leaves nothing;
#   - dpkg-buildpackage -us -uc -b (scripts/build-deb.sh), lintian with no
#     E: line, and what each package contains.
#
# Nothing outside a temporary directory is written: the builds run in
# copies of the tree, and the system's dkms tree is checked to be untouched
# at the end.  Runs as root (CI) or as a user with the packages installed
# (make deps).  TP_KVERS="KVER ..." picks the kernels; TP_KEEP=1 keeps the
# temporary directory.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/tp-packaging.XXXXXX")
cleanup() {
	if [ -n "${TP_KEEP:-}" ]; then
		echo "# kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

n=0
failed=0
echo "TAP version 13"

# check DESCRIPTION COMMAND...: one test point.  COMMAND runs with errexit
# in a subshell, its output into a log whose tail becomes TAP comments when
# it fails.  (Not in an if: errexit would be off inside it.)
check() {
	local desc=$1 rc log
	shift
	n=$((n + 1))
	log=$work/log.$n
	set +e
	(
		set -e
		"$@"
	) >"$log" 2>&1
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		echo "ok $n - $desc"
	else
		failed=$((failed + 1))
		echo "not ok $n - $desc"
		tail -n 40 "$log" | sed 's/^/#   /'
	fi
}

fail() {
	echo "$*" >&2
	return 1
}

version=$("$top/scripts/version.sh")
# The SONAME's number is the major version, and the library's package is
# named after it (Documentation/abi.rst).
sover=${version%%.*}
soname=libtpu_user.so.$sover
libpkg=libtpu-user$sover
multiarch=$(cc -print-multiarch 2>/dev/null || true)
dkms_src_rel=usr/src/tensorpipe-$version

# ---------------------------------------------------------------------------
# Tools, a copy of the tree, the version

tools_present() {
	local missing=() t
	for t in dkms dh_dkms dpkg-buildpackage dpkg-parsechangelog lintian pkg-config \
		cc make modinfo readelf man; do
		command -v "$t" >/dev/null || missing+=("$t")
	done
	[ ${#missing[@]} -eq 0 ] || fail "missing: ${missing[*]} (scripts/deps.sh installs them)"
}
check "packaging tools installed" tools_present

if ! "$top/scripts/copy-tree.sh" "$work/tree" >"$work/copy.log" 2>&1; then
	echo "Bail out! copying the tree failed: $(cat "$work/copy.log")"
	exit 1
fi
tree=$work/tree

changelog_version() {
	local deb
	deb=$(dpkg-parsechangelog -l "$tree/debian/changelog" -SVersion)
	echo "debian/changelog: $deb, include/tpu_user.h: $version"
	# A Debian revision (-N) or a native rebuild (+...) may follow.
	case "$deb" in
	"$version" | "$version"-* | "$version"+*) ;;
	*) fail "debian/changelog's version does not start with $version" ;;
	esac
}
check "debian/changelog's version is include/tpu_user.h's ($version)" changelog_version

# ---------------------------------------------------------------------------
# DKMS, in private trees

# What the system's dkms state looks like, to prove it unchanged at the end.
system_dkms_state() {
	find /var/lib/dkms /etc/dkms -printf '%p %y %s %T@\n' 2>/dev/null | sort
	find /lib/modules -path '*/updates/dkms/*' -printf '%p %s %T@\n' 2>/dev/null | sort
	ls -d /usr/src/tensorpipe-* 2>/dev/null || true
}
system_dkms_state >"$work/dkms-state.before"

stage=$work/stage
stage_dkms_tree() {
	make -C "$tree/packaging" install DESTDIR="$stage"
	local d=$stage/$dkms_src_rel f
	for f in dkms.conf kmod/Makefile kmod/Kbuild kmod/conftest.sh kmod/tp_main.c \
		kmod/tp_compat.h include/uapi/linux/tensorpipe.h; do
		[ -f "$d/$f" ] || fail "$d/$f missing"
	done
	[ -x "$d/kmod/conftest.sh" ] || fail "conftest.sh is not executable"
	grep -qx "PACKAGE_VERSION=\"$version\"" "$d/dkms.conf" || fail "dkms.conf: PACKAGE_VERSION is not $version"
	grep -qx 'AUTOINSTALL="yes"' "$d/dkms.conf" || fail "dkms.conf: no AUTOINSTALL"
	[ -z "$(find "$d" -name '*.o' -o -name '*.ko' -o -name '*.mod.c' -o -name '.conftest')" ] ||
		fail "build output in the DKMS tree"
}
check "make -C packaging install lays out /$dkms_src_rel" stage_dkms_tree

dkms_private() {
	dkms --dkmstree "$work/dkms" --sourcetree "$stage/usr/src" \
		--installtree "$work/dkms-install" "$@"
}
# dkms signs what it builds, generating a key when there is none; this one
# is thrown away with the rest (the default would be /var/lib/dkms/mok.key).
export mok_signing_key=$work/mok.key mok_certificate=$work/mok.pub
mkdir -p "$work/dkms" "$work/dkms-install"

check "dkms add tensorpipe/$version (private dkms tree)" dkms_private add -m tensorpipe -v "$version"

if [ -n "${TP_KVERS:-}" ]; then
	read -r -a kvers <<<"$TP_KVERS"
else
	kvers=()
	for build in /lib/modules/*/build; do
		[ -f "$build/Makefile" ] && kvers+=("$(basename "$(dirname "$build")")")
	done
	if [ ${#kvers[@]} -gt 0 ]; then
		mapfile -t kvers < <(printf '%s\n' "${kvers[@]}" | sort -V)
	fi
fi

no_kernels() {
	fail "no kernel build tree under /lib/modules (linux-headers-*; make deps)"
}
if [ ${#kvers[@]} -eq 0 ]; then
	check "kernels to build for" no_kernels
fi

dkms_build() {
	local kver=$1
	if ! dkms_private build -m tensorpipe -v "$version" -k "$kver"; then
		find "$work/dkms/tensorpipe" -name make.log -exec tail -n 30 {} + 2>/dev/null
		return 1
	fi
	dkms_private status -m tensorpipe -v "$version" -k "$kver" | grep -q ': built$' ||
		fail "dkms status does not say built"
}

module_vermagic() {
	local kver=$1 ko vermagic
	ko=$(find "$work/dkms/tensorpipe/$version/$kver" -name 'tensorpipe.ko*' | head -n 1)
	[ -n "$ko" ] || fail "no tensorpipe.ko* for $kver in the dkms tree"
	vermagic=$(modinfo -F vermagic "$ko")
	echo "$ko: vermagic $vermagic"
	[ "${vermagic%% *}" = "$kver" ] || fail "vermagic is not $kver"
}

for kver in "${kvers[@]}"; do
	check "dkms build for $kver" dkms_build "$kver"
	check "the module dkms built for $kver has vermagic $kver" module_vermagic "$kver"
done

# ---------------------------------------------------------------------------
# make install / make uninstall

# list ROOT: every file and link under ROOT, links with their targets.
list_tree() {
	(cd "$1" && find . \( -type f -o -type l \) -printf '/%P %y %l\n' | sed 's/ $//' | sort)
}

install_usr() {
	local d=$work/root-usr
	make -C "$tree" install DESTDIR="$d" PREFIX=/usr
	list_tree "$d" >"$work/usr.list"
	cat >"$work/usr.expected" <<-EOF
		/usr/bin/tpbench f
		/usr/bin/tpctl f
		/usr/bin/tpdemo f
		/usr/include/linux/tensorpipe.h f
		/usr/include/tpu_user.h f
		/usr/lib/libtpu_user.a f
		/usr/lib/libtpu_user.so l $soname
		/usr/lib/$soname l libtpu_user.so.$version
		/usr/lib/libtpu_user.so.$version f
		/usr/lib/pkgconfig/tpu_user.pc f
		/usr/share/man/man1/tpbench.1 f
		/usr/share/man/man1/tpctl.1 f
		/usr/share/man/man1/tpdemo.1 f
	EOF
	diff -u "$work/usr.expected" "$work/usr.list"
	grep -qx 'prefix=/usr' "$d/usr/lib/pkgconfig/tpu_user.pc" || fail "tpu_user.pc: prefix is not /usr"
	grep -qx 'libdir=/usr/lib' "$d/usr/lib/pkgconfig/tpu_user.pc" || fail "tpu_user.pc: libdir is not /usr/lib"
	readelf -d "$d/usr/lib/libtpu_user.so.$version" | grep -qF "Library soname: [$soname]" ||
		fail "the shared library's SONAME is not $soname"
	for t in tpbench tpctl tpdemo; do
		[ -x "$d/usr/bin/$t" ] || fail "$t is not executable"
	done
	"$d/usr/bin/tpctl" version
}
check "make install DESTDIR=... PREFIX=/usr installs the library, headers, .pc, tools, man pages" install_usr

uninstall_usr() {
	local d=$work/root-usr
	make -C "$tree" uninstall DESTDIR="$d" PREFIX=/usr
	list_tree "$d" >"$work/usr.left"
	[ ! -s "$work/usr.left" ] || { cat "$work/usr.left"; fail "left behind"; }
}
check "make uninstall DESTDIR=... PREFIX=/usr removes all of it" uninstall_usr

man_pages() {
	local page out
	for page in "$tree"/man/*.1; do
		out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
		[ -z "$out" ] || fail "$page: $out"
		man -l "$page" 2>/dev/null | grep -q '^SYNOPSIS' || fail "$page: no SYNOPSIS"
	done
}
check "man pages render without groff warnings" man_pages

pc_search_path() {
	local path
	path=$(pkg-config --variable pc_path pkg-config)
	echo "pkg-config searches $path"
	case ":$path:" in *:/usr/local/lib/pkgconfig:*) ;; *) fail "not /usr/local/lib/pkgconfig" ;; esac
	case ":$path:" in *:/usr/lib/pkgconfig:*) ;; *) fail "not /usr/lib/pkgconfig" ;; esac
}
check "pkg-config finds PREFIX/lib/pkgconfig for /usr and /usr/local without PKG_CONFIG_PATH" \
	pc_search_path

install_local() {
	local d=$work/root-local cflags libs
	make -C "$tree" install DESTDIR="$d" PREFIX=/usr/local
	grep -qx 'prefix=/usr/local' "$d/usr/local/lib/pkgconfig/tpu_user.pc" ||
		fail "tpu_user.pc: prefix is not /usr/local"
	# As pkg-config would see the installed file, the DESTDIR prepended.
	pc() { PKG_CONFIG_LIBDIR=$d/usr/local/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$d pkg-config "$@"; }
	# Word lists, normalised (pkg-config ends them with a blank).
	read -r -a libs <<<"$(pc --libs tpu_user)"
	read -r -a cflags <<<"$(pc --cflags tpu_user)"
	echo "pkg-config --cflags --libs tpu_user: ${cflags[*]} ${libs[*]}"
	[ "${libs[*]}" = "-L$d/usr/local/lib -ltpu_user" ] || fail "unexpected --libs: ${libs[*]}"
	[ "$(pc --modversion tpu_user)" = "$version" ] || fail "--modversion is not $version"
	cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror "${cflags[@]}" -o "$work/rendezvous_hello" \
		"$tree/examples/rendezvous_hello.c" "${libs[@]}" -pthread
	readelf -d "$work/rendezvous_hello" | grep -qF "Shared library: [$soname]" ||
		fail "rendezvous_hello does not link $soname"
	LD_LIBRARY_PATH=$d/usr/local/lib timeout 60 "$work/rendezvous_hello" | tee "$work/hello.out"
	grep -q 'got' "$work/hello.out" || fail "rendezvous_hello printed no 'got'"
	# The ABI header alone, as the README's raw example uses it.
	printf '#include <linux/tensorpipe.h>\nint main(void) { return TP_IOC_DOMAIN_CREATE == 0; }\n' \
		>"$work/uapi.c"
	cc -Wall -Werror "${cflags[@]}" -o "$work/uapi" "$work/uapi.c"
}
check "make install PREFIX=/usr/local: pkg-config, examples/rendezvous_hello.c built and run against it" \
	install_local

uninstall_local() {
	local d=$work/root-local
	make -C "$tree" uninstall DESTDIR="$d" PREFIX=/usr/local
	list_tree "$d" >"$work/local.left"
	[ ! -s "$work/local.left" ] || { cat "$work/local.left"; fail "left behind"; }
}
check "make uninstall DESTDIR=... PREFIX=/usr/local removes all of it" uninstall_local

# ---------------------------------------------------------------------------
# Debian packages

debs=$work/deb
build_debs() {
	"$top/scripts/build-deb.sh" "$debs"
	local p
	for p in tensorpipe-dkms_"$version"_all "$libpkg"_"$version"_* \
		libtpu-user-dev_"$version"_* tensorpipe-tools_"$version"_*; do
		compgen -G "$debs/$p.deb" >/dev/null || fail "$p.deb was not built"
	done
}
check "dpkg-buildpackage -us -uc -b (scripts/build-deb.sh, in a copy of the tree)" build_debs

run_lintian() {
	local changes
	changes=$(compgen -G "$debs/tensorpipe_${version}_*.changes" | head -n 1)
	[ -n "$changes" ] || fail "no .changes file"
	# Lintian's exit status depends on its version's defaults; E: lines decide.
	lintian -I --pedantic "$changes" >"$work/lintian.out" 2>&1 || true
	cat "$work/lintian.out"
	echo "lintian: $(grep -c '^E:' "$work/lintian.out") errors," \
		"$(grep -c '^W:' "$work/lintian.out") warnings," \
		"$(grep -c '^I:' "$work/lintian.out") info," \
		"$(grep -c '^P:' "$work/lintian.out") pedantic"
	! grep -q '^E:' "$work/lintian.out"
}
check "lintian reports no errors" run_lintian
if [ -f "$work/lintian.out" ]; then
	tail -n 1 "$work/log.$n" | sed 's/^/# /'
fi

# deb_root NAME: the package's files, unpacked once.
deb_root() {
	local root=$work/unpacked/$1 deb
	if [ ! -d "$root" ]; then
		deb=$(compgen -G "$debs/$1_${version}_*.deb" | head -n 1)
		[ -n "$deb" ] || fail "no $1 package"
		mkdir -p "$root"
		dpkg-deb -x "$deb" "$root"
	fi
	echo "$root"
}

dkms_package() {
	local root
	root=$(deb_root tensorpipe-dkms)
	# The package's tree is the one make dkms-install installs and dkms built above.
	diff -r "$stage/$dkms_src_rel" "$root/$dkms_src_rel"
	[ -f "$root/lib/udev/rules.d/60-tensorpipe.rules" ] || fail "no udev rule"
	grep -q 'GROUP="tensorpipe", MODE="0660"' "$root/lib/udev/rules.d/60-tensorpipe.rules" ||
		fail "the udev rule does not give the node to group tensorpipe, 0660"
	grep -qx tensorpipe "$root/usr/lib/modules-load.d/tensorpipe.conf" || fail "no modules-load.d file"
	dpkg-deb -I "$(compgen -G "$debs/tensorpipe-dkms_${version}_all.deb")" postinst >"$work/postinst"
	grep -q 'addgroup --system' "$work/postinst" || fail "postinst does not create the group"
	grep -q 'common.postinst' "$work/postinst" || fail "postinst does not run dkms"
	dpkg-deb -f "$(compgen -G "$debs/tensorpipe-dkms_${version}_all.deb")" Depends | grep -q dkms ||
		fail "tensorpipe-dkms does not depend on dkms"
}
check "tensorpipe-dkms: the DKMS tree make dkms-install installs, udev rule, modules-load.d, postinst" \
	dkms_package

lib_packages() {
	local lib dev libdir=usr/lib/$multiarch
	lib=$(deb_root "$libpkg")
	dev=$(deb_root libtpu-user-dev)
	[ -f "$lib/$libdir/libtpu_user.so.$version" ] || fail "$libpkg: no $libdir/libtpu_user.so.$version"
	[ -L "$lib/$libdir/$soname" ] || fail "$libpkg: no $soname link"
	readelf -d "$lib/$libdir/libtpu_user.so.$version" | grep -qF "Library soname: [$soname]" ||
		fail "SONAME is not $soname"
	for f in usr/include/tpu_user.h usr/include/linux/tensorpipe.h "$libdir/libtpu_user.a" \
		"$libdir/pkgconfig/tpu_user.pc"; do
		[ -f "$dev/$f" ] || fail "libtpu-user-dev: no $f"
	done
	[ -L "$dev/$libdir/libtpu_user.so" ] || fail "libtpu-user-dev: no libtpu_user.so link"
	grep -qx "libdir=/$libdir" "$dev/$libdir/pkgconfig/tpu_user.pc" || fail "tpu_user.pc: libdir"
}
check "$libpkg (SONAME $soname) and libtpu-user-dev" lib_packages

tools_package() {
	local root t
	root=$(deb_root tensorpipe-tools)
	for t in tpbench tpctl tpdemo; do
		[ -x "$root/usr/bin/$t" ] || fail "no /usr/bin/$t"
		[ -f "$root/usr/share/man/man1/$t.1.gz" ] || fail "no man page for $t"
	done
	"$root/usr/bin/tpctl" version
}
check "tensorpipe-tools: tpctl, tpbench, tpdemo and their man pages" tools_package

# ---------------------------------------------------------------------------

untouched() {
	system_dkms_state >"$work/dkms-state.after"
	diff -u "$work/dkms-state.before" "$work/dkms-state.after"
}
check "the system's dkms tree, /usr/src and /lib/modules/*/updates/dkms are untouched" untouched

echo "1..$n"
echo "# $((n - failed)) passed, $failed failed in $(($(date +%s) - started))s"
[ $failed -eq 0 ]
