import { closeLeftovers } from './leftovers';

// Runs after the spec's own afterAll hooks of its describe blocks: closes what a failed test left open.
afterAll(() => closeLeftovers());
