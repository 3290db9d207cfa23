//go:build !linux

package bench

import vegeta "github.com/tsenart/vegeta/v12/lib"

// precisePacer is a vegeta pacer as it is (the precise sleep is Linux's).
type precisePacer struct {
	vegeta.Pacer
}
