"""cc_proto: C++ code for one .proto file from the system protoc (3.21)."""

def cc_proto(name, src, deps = [], visibility = None):
    """Generates <src>.pb.{h,cc} with /usr/bin/protoc and wraps them.

    Imports are resolved from the workspace root, so a .proto imports another
    as "common/foo.proto"; list the imported cc_proto targets in deps and their
    .proto files are made visible to protoc.
    """
    base = src[:-len(".proto")]
    native.genrule(
        name = name + "_gen",
        srcs = [src] + [d + "_srcs" for d in deps],
        outs = [base + ".pb.h", base + ".pb.cc"],
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR) $(location " + src + ")",
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = [src] + [d + "_srcs" for d in deps],
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc"],
        hdrs = [base + ".pb.h"],
        deps = deps + ["//third_party:protobuf"],
        visibility = visibility,
    )
