//go:build !race

package doctor

const raceEnabled = false
