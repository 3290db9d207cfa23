package cpuwork

import "context"

// Call is Do for a function that returns a value: it waits for a slot of
// class c on e, runs fn and returns its result. Errors are those of Do; on
// an error other than fn's own, the zero T is returned.
func Call[T any](ctx context.Context, e *Executor, c Class, fn func(context.Context) (T, error)) (T, error) {
	var v T
	mustCtx(ctx)
	mustExec(e)
	if fn == nil {
		return v, errNilFunc
	}
	err := e.Do(ctx, c, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	return v, err
}
