// KLineage saved queries for Neo4j Browser. Drag this file onto Browser's Favorites ("Saved Cypher")
// drawer to import them, or paste one into the editor. Style: drag klineage.grass onto Browser.

// Lineage as a chain: starting kernel, steps in order (rejected ones lead nowhere), the kernels they
// lead to and the skills they reverse into
MATCH (l:Lineage)-[:OF]->(w:Workload)
MATCH (l)-[:STARTS_AT]->(k0:Kernel)
MATCH (l)-[h:HAS_STEP]->(s:Step)
MATCH (s)-[f:FROM]->(kf:Kernel)
OPTIONAL MATCH (s)-[t:TO]->(kt:Kernel)
OPTIONAL MATCH (s)-[r:REVERSES_INTO]->(sk:Skill)
RETURN l, w, k0, h, s, f, kf, t, kt, r, sk;

// One lineage's steps in order, as a table (accepted or the gate that rejected them)
MATCH (l:Lineage)-[h:HAS_STEP]->(s:Step)
RETURN l.workload AS workload, l.gpu AS gpu, h.index AS step, s.operator AS operator,
       s.accepted AS accepted, s.gate AS rejected_by, s.reason AS reason
ORDER BY workload, step;

// Skills with their conditions and risks
MATCH (sk:Skill)
OPTIONAL MATCH (sk)-[v:VALID_WHEN]->(cv:Condition)
OPTIONAL MATCH (sk)-[p:PROFITABLE_WHEN]->(cp:Condition)
OPTIONAL MATCH (sk)-[x:RISKS]->(r:Risk)
RETURN sk, v, cv, p, cp, x, r;

// The evidence behind one skill: the steps that reverse into it and their lineages
MATCH (l:Lineage)-[h:HAS_STEP]->(s:Step)-[e:REVERSES_INTO]->(sk:Skill)
RETURN l, h, s, e, sk;

// Kernels validated on an architecture
MATCH (k:Kernel)-[v:VALIDATED_BY]->(g:GateRun)-[o:ON]->(a:Architecture)
RETURN k, v, g, o, a;
