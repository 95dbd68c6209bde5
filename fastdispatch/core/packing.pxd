# Host leaves in one transfer: a packed variant of an entry's executable.
cimport cython


# The packed variant of one executable: it takes the call's host leaves as one
# uint8 array, sliced and bitcast back into them on the device.
@cython.final
cdef class Packed:
    cdef object execute                # the variant's LoadedExecutable.execute_sharded, bound
    cdef list out_handlers             # its result handlers (the entry's results, alike)
    cdef tuple slots                   # per packed leaf: a Slot (where its bytes go)
    cdef tuple other_leaf              # the flat leaf index of each other kept input, in order
    cdef tuple other_is_key            # per other input: a typed key (its physical array goes in)
    cdef Py_ssize_t num_bytes          # the packed array's length
    cdef object aval                   # uint8[num_bytes], for batched_device_put
    cdef object sharding               # the device's sharding
    cdef list devices                  # [the device]

    # The flat outputs (a list) of one call on its flat leaves, or None when a
    # host value does not pack (an int too large for its dtype, a transfer
    # guard set): the entry's own way then takes the call.
    cdef object run(self, object leaves)
