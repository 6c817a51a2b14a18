// KLineage saved queries for Neo4j Browser. Drag this file onto Browser's Favorites ("Saved Cypher")
// drawer to import them, or paste one into the editor. Style: drag klineage.grass onto Browser.
// (The first query is the one tests/neo4j/test_browser.py runs for docs/neo4j-browser-lineage.png.)

// One lineage as a chain, naive -> expert: each EVOLVES_TO arrow is one skill with the speedup it
// measured (simplified / optimized time, geomean over the shapes); a rejected attempt is a dead-end
// branch (its arrow says which gate failed). Kernels are numbered v0 (naive) ... vN (expert).
// Change 'gemm' to see another workload's lineage.
MATCH (l:Lineage {workload: 'gemm'})
MATCH (a:Kernel)-[e:EVOLVES_TO {lineage: l.id}]->(b:Kernel)
RETURN a, e, b;

// One skill with its evidence: the steps that reverse into it, their lineages, the kernels the step
// went between, and the skill's conditions and risks. Change 'pipelining' to another operator.
MATCH (sk:Skill {operator: 'pipelining'})
OPTIONAL MATCH (l:Lineage)-[h:HAS_STEP]->(s:Step)-[e:REVERSES_INTO]->(sk)
OPTIONAL MATCH (s)-[f:FROM]->(kf:Kernel)
OPTIONAL MATCH (s)-[t:TO]->(kt:Kernel)
OPTIONAL MATCH (sk)-[c:VALID_WHEN|PROFITABLE_WHEN]->(cond:Condition)
OPTIONAL MATCH (sk)-[x:RISKS]->(r:Risk)
RETURN sk, l, h, s, e, f, kf, t, kt, c, cond, x, r;

// Every lineage as a chain of kernels (naive -> expert), the lineage node at its expert end
MATCH (l:Lineage)-[st:STARTS_AT]->(:Kernel)
MATCH (a:Kernel)-[e:EVOLVES_TO {lineage: l.id}]->(b:Kernel)
RETURN l, st, a, e, b;

// One lineage's steps in order, as a table (accepted or the gate that rejected them)
MATCH (l:Lineage)-[h:HAS_STEP]->(s:Step)
RETURN l.workload AS workload, l.gpu AS gpu, h.index AS step, s.operator AS operator,
       s.accepted AS accepted, s.gate AS rejected_by, s.reason AS reason
ORDER BY workload, step;

// Skills with their conditions (VALID_WHEN: where the gates passed; PROFITABLE_WHEN: where it paid)
// and risks (what the measured failures and regressions were)
MATCH (sk:Skill)
OPTIONAL MATCH (sk)-[v:VALID_WHEN]->(cv:Condition)
OPTIONAL MATCH (sk)-[p:PROFITABLE_WHEN]->(cp:Condition)
OPTIONAL MATCH (sk)-[x:RISKS]->(r:Risk)
RETURN sk, v, cv, p, cp, x, r;

// Kernels validated on an architecture
MATCH (k:Kernel)-[v:VALIDATED_BY]->(g:GateRun)-[o:ON]->(a:Architecture)
RETURN k, v, g, o, a;
