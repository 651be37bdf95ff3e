. dev/call_lib.sh; unpack_builds; log soak; MEGAOPS_SOAK_SECONDS=270 MEGAOPS_SOAK_PDL_CHAIN=1 MEGAOPS_SOAK_BATCH=1 gpu_tests soak $X/main 330 Overlap.Soak; call_finish
