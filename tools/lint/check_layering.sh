#!/usr/bin/env bash
# Layering lint: gcc has no layering_check, so a target that may depend on
# //ps/net could still #include a van's private header transitively. This
# script rejects such includes by path.
#
#   check_layering.sh ROOT    (exit 0 clean, 1 with one line per violation)
#
# Rules (see DESIGN.md, "Layers"):
#   ps/app:   may include ps/base/*, ps/net/*.h (the net public API, top level
#             only), ps/net/codec/message.h, ps/gpu/*.h, ps/app/*, ps/*.h.
#             Never a van, the van interface, ps/rdma, or an internal header.
#   ps/base:  libc only: no other ps layer.
#   ps/net/codec: base only.
#   ps/gpu:   base only.
set -uo pipefail
root=${1:?usage: check_layering.sh ROOT}
status=0

violation() {
  echo "layering: $1: includes \"$2\": $3"
  status=1
}

# Prints "file<TAB>included path" for every quoted ps/ include under $1.
includes_under() {
  [ -d "$root/$1" ] || return 0
  find -L "$root/$1" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.inl' \) -print0 |
    while IFS= read -r -d '' f; do
      sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(ps\/[^"]*\)".*/\1/p' "$f" |
        while IFS= read -r inc; do printf '%s\t%s\n' "${f#"$root"/}" "$inc"; done
    done
}

while IFS=$'\t' read -r file inc; do
  case "$inc" in
    *internal*) violation "$file" "$inc" "internal headers stay inside their layer" ;;
    ps/base/*|ps/app/*|ps/net/codec/message.h) ;;
    ps/gpu/*/*) violation "$file" "$inc" "ps/gpu subdirectories are private to the GPU layer" ;;
    ps/gpu/*) ;;
    ps/net/*/*) violation "$file" "$inc" "apps use the net public API (ps/net/*.h), never a van or the van interface" ;;
    ps/net/*) ;;
    ps/rdma/*) violation "$file" "$inc" "apps never touch the RDMA transports" ;;
    ps/*/*) violation "$file" "$inc" "not a layer the app may use" ;;
    ps/*) ;;
  esac
done < <(includes_under ps/app)

while IFS=$'\t' read -r file inc; do
  case "$inc" in
    ps/base/*) ;;
    *) violation "$file" "$inc" "ps/base uses libc only" ;;
  esac
done < <(includes_under ps/base)

for layer in ps/net/codec ps/gpu; do
  while IFS=$'\t' read -r file inc; do
    case "$inc" in
      ps/base/*|"$layer"/*) ;;
      *) violation "$file" "$inc" "$layer may use ps/base only" ;;
    esac
  done < <(includes_under "$layer")
done

exit $status
