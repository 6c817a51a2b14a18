# Every target sets itself up: the first run creates .venv and installs klineage with its dev tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test serve bench bench-gpu lint neo4j neo4j-stop clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)  ## Build the knowledge base from every lineage document and answer one search.
	$(BIN)/klineage demo

test: $(STAMP)  ## Run the test suite (starts a local Neo4j when NEO4J_URI is unset).
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

serve: $(STAMP)  ## Serve the GraphQL API at http://127.0.0.1:8000/graphql.
	$(BIN)/klineage serve

bench: $(STAMP)  ## Search benchmark on a synthetic store of 10,000 skills.
	$(BIN)/python bench/search.py

lint: $(STAMP)  ## ruff over the package, tests and benchmarks; mypy over the package ([tool.mypy]).
	$(BIN)/ruff check klineage tests bench
	$(BIN)/python -m mypy

neo4j: $(STAMP)  ## Start a local Neo4j 5.26 from Maven Central jars (no Docker needed).
	deploy/neo4j/start

neo4j-stop:
	deploy/neo4j/stop

clean:
	rm -rf $(VENV) .klineage .pytest_cache .ruff_cache
