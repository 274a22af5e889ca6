"""The run seed every test stack's proxy gets (``ProxySettings.sample_seed``): harnesses at their defaults send no
seed, and no test may pass or fail on the luck of an unseeded sample."""

SAMPLE_SEED = 20261206
SAMPLE_SEED_ENV = {"ROLLWIRE_PROXY__SAMPLE_SEED": str(SAMPLE_SEED)}
"""The same, for a stack whose proxy is a child process configured from its environment."""
