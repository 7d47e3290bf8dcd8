package loadbalancer

// state is what the load balancer knows of one server. The order matters:
// when the active server must be replaced, the candidate in the highest
// state wins, and the seed (--server) is used only when no learned server
// is better than failed.
type state int

const (
	// stateFailed: the last health checks or a dial failed.
	stateFailed state = iota
	// stateUnchecked: learned, not checked yet.
	stateUnchecked
	// stateRecovering: failed before, has passed one health check since.
	stateRecovering
	// stateHealthy: passes its health checks; a candidate.
	stateHealthy
	// stateActive: the one server every new connection goes to.
	stateActive
)

func (s state) String() string {
	switch s {
	case stateFailed:
		return "failed"
	case stateUnchecked:
		return "unchecked"
	case stateRecovering:
		return "recovering"
	case stateHealthy:
		return "healthy"
	case stateActive:
		return "active"
	}
	return "unknown"
}

// event is something that happened to one server.
type event int

const (
	// checkPassed and checkFailed are health check results.
	checkPassed event = iota
	checkFailed
	// dialFailed: a connection to it could not be opened.
	dialFailed
	// chosen: it became the active server; replaced: another one did.
	chosen
	replaced
)

// failThreshold is how many health checks in a row must fail before a
// healthy or active server counts as failed: on a loaded machine one slow
// answer is not a dead server. A refused dial needs no second opinion.
const failThreshold = 2

// next is the whole state machine. streak is how many results of the
// event's kind arrived in a row, this one included.
func next(s state, ev event, streak int) state {
	switch ev {
	case dialFailed:
		return stateFailed
	case chosen:
		return stateActive
	case replaced:
		if s == stateActive {
			return stateHealthy
		}
		return s
	case checkPassed:
		switch s {
		case stateUnchecked:
			return stateHealthy
		case stateFailed:
			return stateRecovering
		case stateRecovering:
			return stateHealthy
		}
		return s
	case checkFailed:
		switch s {
		case stateUnchecked, stateRecovering, stateFailed:
			return stateFailed
		case stateHealthy, stateActive:
			if streak >= failThreshold {
				return stateFailed
			}
		}
		return s
	}
	return s
}
