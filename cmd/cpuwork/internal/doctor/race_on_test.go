//go:build race

package doctor

// raceEnabled: the test binary is built with the race detector, which
// multiplies the cost of every instruction the target runs.
const raceEnabled = true
