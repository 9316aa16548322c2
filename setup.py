"""Build hook for the three C extensions; everything else is in pyproject.toml.

`lograft.protocol._recordscan` validates record batches on append;
`lograft.protocol._recordencode` encodes the records of a batch (the producer
side, batch.build_batch); `lograft.protocol._columnencode` encodes a batch of
plain records from columns (the JSON produce path, plain_batch.py). Each is
optional: when it cannot be compiled (no compiler, no Python headers) the
install still succeeds and `lograft.protocol.record_scan` uses its
pure-Python walker (and batch.py and plain_batch.py their pure-Python
encoders). Editable installs copy the built modules into
lograft/protocol/, so after editing a C source rerun `pip install -e .`
(scripts/setup.sh does when the sources' hash changes). The test command does
not accept the fallback: scripts/test.sh runs scripts/check_native.py, which
fails when a module is missing or of another ABI.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lograft.protocol._recordscan",
            sources=["lograft/protocol/_recordscan.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "lograft.protocol._columnencode",
            sources=["lograft/protocol/_columnencode.c"],
            depends=["lograft/protocol/record_writer.h"],
            extra_compile_args=["-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "lograft.protocol._recordencode",
            sources=["lograft/protocol/_recordencode.c"],
            depends=["lograft/protocol/record_writer.h"],
            extra_compile_args=["-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ]
)
