"""What the framework bridges (strata.torch, strata.jax) share: the VJP of a
Strata function as a Strata function of the primals and the cotangents,
which each bridge wraps again so that every order of derivative runs on
Strata's side."""
import strata as _strata


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def strata_vjp(f, n):
    """The VJP of a Strata function of n tensors, as a Strata function of
    the n primals and one cotangent per output."""

    def vjp(*args):
        primals, cotangents = args[:n], args[n:]
        with _strata.GradientTape(higher_order=True) as tape:
            for p in primals:
                tape.watch(p)
            outs = as_tuple(f(*primals))
            total = sum(((o * c).sum() for o, c in zip(outs, cotangents)), _strata.zeros([], dtype=outs[0].dtype))
            grads = tape.gradient(total, list(primals))
        return grads[0] if n == 1 else tuple(grads)

    vjp.__name__ = f"{getattr(f, '__name__', 'f')}_vjp"
    return vjp
