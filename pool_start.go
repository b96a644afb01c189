package asynctool

// tryStart runs task at once on an idle worker or on a new one, if the
// pool has one to spare; unlike trySubmit it never queues the task. The
// scheduler uses it to wake helpers only when a goroutine is free to help.
func (p *Pool) tryStart(task func()) bool {
	if p.closed.Load() {
		return false
	}
	select {
	case p.handoff <- task:
		return true
	default:
	}
	return p.workers.Load() < p.size && p.startWorker(task) == offerOK
}
