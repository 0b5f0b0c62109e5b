"""Marconi's replay as compiled code (numba): the tree, the candidates and victims, the cache.

Everything compiled lives in this package, and every function is cached on disk under
a hash of all its modules (``compiling``: a cached function carries its callees'
code, and numba alone would not see a callee in another file change), so any change
recompiles all of it. The modules import each other as modules (``state.LEN``,
``edits._pin``: numba reads a module's attribute at compile time as it reads a name; an
underscore here: private to the package).

The state of one replay is one tuple ``st = (nd, sc, mc, mf, cr, cf, ch, cn,
kids, buf, victims, score, path, free, handed, ends)`` of flat arrays (``state``):

- ``nd``: node fields, rows named in ``state`` (node 0 is the root; in a replay
  nodes are never reused, so a node's index is its creation order);
- ``sc``: the replay's scalars (clocks, counters, the candidate count);
- ``mc`` / ``mf``: the model's and the capacity's integer / float constants;
- ``cr``, ``cf``, ``ch``, ``cn``: the candidate table
  (the oracle's ``CandidateTable``, ``tests/marconi_oracle.py``: recency, FLOP efficiency,
  held, node; swap-removed rows);
- ``kids``: the children's keys (``tree``), a (key, child) row per slot: a probe reads
  one cache line, not two;
- ``buf``: every token the replay reads (the trace's, then a restored snapshot's);
- ``victims``: the creation id of each node evicted, in order;
- ``score``: scratch for the victim pass;
- ``path``: scratch for a walk's nodes; ``free``: a live cache's free node ids;
- ``handed``, ``ends``: a live cache's victims for a write-back hook since the
  caller last took them (``mc[M_HOOK]``): their token paths one after another, and
  per victim where its path ends and whether its state went with it
  (``PrefixCache._tell_evict``).

Each module is the transliteration of one Python piece (the same operations in the
same order; each function names what it follows). The Marconi rules' Python pieces
(their hooks on the radix tree, the candidate table) live in the tests' oracle
(``tests/marconi_oracle.py``): this package is their one production implementation.
The modules, each importing only those before it:

- ``compiling``: numba's ``njit`` with the package's cache stamp;
- ``state``: the state tuple's layout (node fields, scalars, constants, the rules'
  codes), its uncounted views, its counters;
- ``tree``: the radix tree (``twin.cache.radix.RadixTree``): the key table, the walk
  and a prefix's match, the sibling lists, pre-order;
- ``scores``: each rule's FLOP efficiency of a node;
- ``victims``: the candidate table and each rule's victim;
- ``buffer``: a live cache's token buffer (edges copied, joined, packed);
- ``edits``: the tree's edits and pins (``twin.cache.tree_edits.TreeEdits``);
- ``admission_cost``: an insert's bytes (``twin.cache.admission_cost.AdmissionCost``);
- ``cache``: the cache (``twin.cache.prefix_cache.PrefixCache``): bytes, eviction,
  insert, a lookup's hit;
- ``request``: one request (``twin.cache.requests.RequestCache.serve`` with Marconi's
  judicious admission);
- ``replay``: a replay over one trace (the grids' and ``oracle``'s entries);
- ``live``: a live cache, the engine's, request by request (its entries).
"""
