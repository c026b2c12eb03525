"""``python -m protein_performer``: the ``protein-performer`` command."""

from protein_performer.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
