"""A DQN loop as RL users write it: a numpy cart-pole environment, a numpy
replay buffer, a jitted ``act(params, obs, key, eps)`` every step and a jitted
``update(params, target, opt_state, batch)`` on a sampled numpy batch every
step once the buffer holds one."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax

GRAVITY, CART_MASS, POLE_MASS, POLE_HALF_LENGTH, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
BATCH, BUFFER, GAMMA = 32, 10_000, 0.99


class CartPole:
    """Gym's CartPole-v1 dynamics in numpy."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.state = None

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = FORCE if action == 1 else -FORCE
        cos, sin = np.cos(theta), np.sin(theta)
        total_mass = CART_MASS + POLE_MASS
        temp = (force + POLE_MASS * POLE_HALF_LENGTH * theta_dot**2 * sin) / total_mass
        theta_acc = (GRAVITY * sin - cos * temp) / (
            POLE_HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos**2 / total_mass)
        )
        x_acc = temp - POLE_MASS * POLE_HALF_LENGTH * theta_acc * cos / total_mass
        self.state = np.array(
            [x + DT * x_dot, x_dot + DT * x_acc, theta + DT * theta_dot, theta_dot + DT * theta_acc]
        )
        self.steps += 1
        done = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 0.21 or self.steps >= 500
        return self.state.astype(np.float32), 1.0, done


class ReplayBuffer:
    def __init__(self, seed):
        self.obs = np.zeros((BUFFER, 4), np.float32)
        self.actions = np.zeros(BUFFER, np.int32)
        self.rewards = np.zeros(BUFFER, np.float32)
        self.next_obs = np.zeros((BUFFER, 4), np.float32)
        self.dones = np.zeros(BUFFER, np.float32)
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def add(self, obs, action, reward, next_obs, done):
        i = self.size % BUFFER
        self.obs[i], self.actions[i], self.rewards[i] = obs, action, reward
        self.next_obs[i], self.dones[i] = next_obs, done
        self.size += 1

    def sample(self):
        idx = self.rng.integers(0, min(self.size, BUFFER), size=BATCH)
        return self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx], self.dones[idx]


def init_params(key):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (4, 64)) * 0.5,
        "b1": jnp.zeros(64),
        "w2": jax.random.normal(k2, (64, 2)) * 0.1,
        "b2": jnp.zeros(2),
    }


def q_values(params, obs):
    hidden = jax.nn.relu(obs @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


optimizer = optax.adam(1e-3)


@jax.jit
def act(params, obs, key, eps):
    explore = jax.random.uniform(key) < eps
    random_action = jax.random.randint(key, (), 0, 2)
    return jnp.where(explore, random_action, jnp.argmax(q_values(params, obs)))


@jax.jit
def update(params, target, opt_state, batch):
    obs, actions, rewards, next_obs, dones = batch

    def loss_fn(p):
        q = jnp.take_along_axis(q_values(p, obs), actions[:, None], axis=1)[:, 0]
        next_q = q_values(target, next_obs).max(axis=1)
        return jnp.mean((q - (rewards + GAMMA * (1.0 - dones) * next_q)) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    env, buffer = CartPole(seed=0), ReplayBuffer(seed=1)
    key = jax.random.key(0)
    key, init_key = jax.random.split(key)
    params = init_params(init_key)
    target = params
    opt_state = optimizer.init(params)
    obs = env.reset()
    episodes, episode_return, returns, loss = 0, 0.0, [], None
    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for t in range(args.steps):
        eps = max(0.05, 1.0 - t / 1000)
        key, act_key = jax.random.split(key)
        action = int(act(params, obs, act_key, eps))
        next_obs, reward, done = env.step(action)
        buffer.add(obs, action, reward, next_obs, done)
        episode_return += reward
        obs = next_obs
        if done:
            returns.append(episode_return)
            episodes, episode_return, obs = episodes + 1, 0.0, env.reset()
        if buffer.size >= BATCH:
            params, opt_state, loss = update(params, target, opt_state, buffer.sample())
        if t % 100 == 0:
            target = params
        if t == 0:
            print(f"step 1 action {action}")

    print(f"episodes {episodes}")
    print(f"mean return {np.mean(returns) if returns else episode_return:.1f}")
    print(f"final loss {float(loss):.5f}")


if __name__ == "__main__":
    main()
