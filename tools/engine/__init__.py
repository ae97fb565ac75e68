"""The certification engine: the runner (certify), its workers (worker, isolation, shards), the
reports (report, junit) and the test lists. tools/certify-cells is its one entry point
(``tools.engine.certify.main``); the other tools are front ends that call into it."""
