"""E2B's template API behind the gateway's routes (rest/routes/templates.py; the SDKs' JSON in
and out is rest/templates/):

- names.py: `name[:tag]` as the SDKs send it (pure)
- build_spec.py: what a build is asked to make, and the node agent's requests for it
- records.py: where the catalog, builds and their claims are kept (etcd; plain dicts in tests)
- catalog.py: templates by id and name, their tags, and what a sandbox of `name:tag` restores
- builds.py: running a build on a scheduled node and following it into its record
- uploads.py: COPY contexts through signed upload links into snapstore
- cleanup.py: a deleted template's images no other build uses: their records and manifests
"""
