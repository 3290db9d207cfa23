//go:build !linux

package bench

import vegeta "github.com/tsenart/vegeta/v12/lib"

// precisePacer is vegeta's constant pacer (the precise sleep is Linux's).
type precisePacer struct {
	vegeta.ConstantPacer
}
