//go:build race

package bench

// raceEnabled: the test binary is built with the race detector, which
// multiplies the cost of the verdict simulations (pure arithmetic, no
// goroutines): they run fewer draws there.
const raceEnabled = true
