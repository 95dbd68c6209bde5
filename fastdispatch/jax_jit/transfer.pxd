# fastdispatch.device_put: host data to one device, leaf by leaf through jaxlib.

# The put of each leaf, in order: onto `sharding` (one device, `device`),
# committed or not; a leaf it does not put itself goes to jax.device_put.
cdef list put_leaves(list leaves, object device, object target, object sharding, bint committed)
