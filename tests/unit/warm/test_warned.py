"""warm/warned.py: what a compile warned, recorded as plain data and issued again by a load."""

import threading
import warnings

from fastdispatch.warm import warned


def test_warnings_are_recorded_by_thread_and_issued_as_from_their_place():
    def warn_elsewhere():
        warnings.warn("another thread's", RuntimeWarning, stacklevel=1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with warned.recording([]) as recorded:
            warnings.warn("this thread's", DeprecationWarning, stacklevel=1)
            thread = threading.Thread(target=warn_elsewhere)
            thread.start()
            thread.join()
        shown = [(str(w.message), w.category) for w in caught]
        assert shown == [("this thread's", DeprecationWarning), ("another thread's", RuntimeWarning)]
        ((module, name, text, issuer, filename, lineno),) = recorded  # plain data
        assert (module, name, text, issuer) == ("builtins", "DeprecationWarning", "this thread's", __name__)
        assert filename == __file__ and warnings.showwarning is not warned._record
        del caught[:]
        warned.issue(recorded)
        (again,) = caught
        assert (str(again.message), again.category) == (text, DeprecationWarning)
        assert (again.filename, again.lineno) == (filename, lineno)
    # Once per place, as the module's own registry says: shown once.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        warned.issue(recorded)
        warned.issue(recorded)
    assert len(caught) == 1
