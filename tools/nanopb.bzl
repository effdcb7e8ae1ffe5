"""nanopb_library: C sources generated at build time from a .proto with
Debian's protoc + protoc-gen-nanopb, compiled against Debian's libnanopb-dev.

The generated .pb.c includes its header by its path from the repository root,
so protoc runs with -I at that root: "." here, "external/<name>" when ps is
consumed as an external repository.
"""

def nanopb_library(name, proto, options = None, deps = [], visibility = None):
    base = proto[:-len(".proto")]
    root = Label("//:WORKSPACE").workspace_root or "."
    pkg = native.package_name()
    srcs = [proto] + ([options] if options else [])
    opt_flag = ""
    if options:
        opt_flag = "--nanopb_opt=-f$(location %s) " % options
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = [base + ".pb.c", base + ".pb.h"],
        cmd = ("protoc --plugin=protoc-gen-nanopb=/usr/bin/protoc-gen-nanopb " +
               "-I{root} {opt}--nanopb_out=$(GENDIR)/{root} $(location {proto}) " +
               "2> $(@D)/protoc.log || {{ cat $(@D)/protoc.log >&2; exit 1; }}").format(
            root = root,
            opt = opt_flag,
            proto = proto,
        ),
        message = "nanopb " + pkg + "/" + proto,
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.c"],
        hdrs = [base + ".pb.h"],
        deps = ["//third_party:nanopb"] + deps,
        visibility = visibility,
    )
