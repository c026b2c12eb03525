"""The command line: :mod:`.main` (argparse), :mod:`.hydra` (compose, overrides, help, resume)
and one small file per command under :mod:`.commands`. Nothing else in the package imports it."""
