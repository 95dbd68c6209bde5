"""equinox: an MLP trained with optax under @eqx.filter_jit, as equinox's
documentation writes it; then a second phase that splits the model with
eqx.partition and trains the parameters under plain jax.jit, eqx.combine inside."""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax


def loss(model, x, y):
    pred_y = jax.vmap(model)(x)
    return jnp.mean((y - pred_y) ** 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    key = jax.random.PRNGKey(0)
    model = eqx.nn.MLP(in_size=4, out_size=1, width_size=32, depth=2, key=key)
    optim = optax.adamw(1e-3)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def make_step(model, opt_state, x, y):
        loss_value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
        return model, opt_state, loss_value

    rng = np.random.default_rng(0)

    def batch():
        x = rng.uniform(-1.0, 1.0, size=(32, 4)).astype(np.float32)
        return x, np.sin(2.0 * x).sum(axis=1, keepdims=True)

    first = args.steps // 2
    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(first):
        x, y = batch()
        model, opt_state, train_loss = make_step(model, opt_state, x, y)
        if step == 0:
            print(f"step 1 loss {float(train_loss):.6f}")
    print(f"filter_jit phase loss {float(train_loss):.6f}")

    # Second phase: partition into arrays and the rest; plain jax.jit over the arrays.
    params, static = eqx.partition(model, eqx.is_array)

    @jax.jit
    def step_params(params, opt_state, x, y):
        def loss_params(params):
            return loss(eqx.combine(params, static), x, y)

        loss_value, grads = jax.value_and_grad(loss_params)(params)
        updates, opt_state = optim.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss_value

    for _ in range(first, args.steps):
        x, y = batch()
        params, opt_state, train_loss = step_params(params, opt_state, x, y)
    print(f"jax.jit phase loss {float(train_loss):.6f}")

    model = eqx.combine(params, static)
    x, y = batch()
    print(f"loss {float(eqx.filter_jit(loss)(model, x, y)):.6f}")
    print(f"last layer weight sum {float(model.layers[-1].weight.sum()):.6f}")


if __name__ == "__main__":
    main()
