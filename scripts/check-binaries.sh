#!/usr/bin/env bash
# scripts/check-binaries.sh — part of `make lint`: fails when git tracks an
# executable binary (ELF, Mach-O or PE/COFF, by the file's first bytes),
# such as what `go build` leaves in a module directory. Build output is
# never committed: .gitignore lists the binaries of the module's main
# packages, and this check catches the ones it misses.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "check-binaries: not a git checkout; nothing to check"
	exit 0
fi

found=()
while IFS= read -r -d '' file; do
	[[ -f $file && ! -L $file ]] || continue
	magic=$(head -c 4 -- "$file" | od -An -tx1 | tr -d ' \n')
	case $magic in
	7f454c46 | feedface | feedfacf | cefaedfe | cffaedfe | cafebabe | 4d5a*)
		# cafebabe is also a Java class file's magic: one is build output too.
		found+=("$file")
		;;
	esac
done < <(git ls-files -z)

if ((${#found[@]})); then
	echo "check-binaries: git tracks executable binaries (build output; remove them with git rm --cached and list them in .gitignore):" >&2
	printf '  %s\n' "${found[@]}" >&2
	exit 1
fi
