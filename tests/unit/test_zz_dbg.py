from fastdispatch import _jax
def test_probe():
    print("LOCAL", _jax._post_hook_state.get_local())
