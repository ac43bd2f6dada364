"""The commons: every protocol that reads or writes CIV_ROOT/shared, and the plain
helpers its stores share - the one lock (`locks`), atomic files (`atomic`), documents,
records (the one reader, `records`), the commons' paths (`layout`), the clock, errors.

Never imports `citizen`. Each protocol keeps its rules pure (no I/O, checked by an
import contract and tests/test_pure_rules.py) apart from its `store`."""
