"""`python -m citizen …` is the same entry point as the `citizen` console script."""

from citizen.cli import main

if __name__ == "__main__":
    main()
