"""Print the ops whose Triton sm90 certificate is not fresh (the certify list of the final GPU call)."""
from ops import catalog, certificates
from ops.catalog import Arch

print(" ".join(sorted({entry.name for entry in catalog.every_kernel() if entry.backend == "triton"
                       and certificates.arch_status(entry, Arch.SM90) != "fresh"})))
