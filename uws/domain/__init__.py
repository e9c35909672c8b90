"""The domain: the records (jobs, batches, holds, events, callbacks) and the pure rules over
them (phases, parameters and services, queueing, estimates, times and numbers).  It imports
nothing of uws outside itself and no framework: no storage, no HTTP, no I/O."""
