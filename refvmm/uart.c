// SPDX-License-Identifier: MIT
/*
 * A 16550A UART for a Linux guest's console: transmit only (nothing is ever received),
 * with the registers Linux's 8250 driver reads back while it probes (IER, LCR, MCR with
 * loopback, scratch, divisor latch, FIFO bits in IIR) and the transmitter-empty
 * interrupt its tty layer waits for.  Bytes leave at once, so the transmitter is always
 * empty: LSR reads THRE | TEMT.  The IRQ line is level: high while an interrupt is
 * pending, as QEMU's serial device does it, so an edge-triggered IOAPIC pin sees a
 * rising edge for each new one.
 */
#include <string.h>
#include "refvmm/linux.h"

#define UART_RX  0 /* read: receive buffer; write: transmit holding */
#define UART_IER 1
#define UART_IIR 2 /* read; write: FCR */
#define UART_LCR 3
#define UART_MCR 4
#define UART_LSR 5
#define UART_MSR 6
#define UART_SCR 7

#define UART_IER_THRI   0x02
#define UART_IIR_NO_INT 0x01
#define UART_IIR_THRI   0x02
#define UART_IIR_FIFO   0xc0 /* FIFOs enabled (16550A) */
#define UART_FCR_ENABLE 0x01
#define UART_LCR_DLAB   0x80
#define UART_MCR_LOOP   0x10
#define UART_LSR_THRE   0x20
#define UART_LSR_TEMT   0x40

void linux_uart_init(struct linux_uart *u, unsigned int irq,
		     void (*irq_fn)(void *, unsigned int, int), void (*out_fn)(void *, uint8_t),
		     void *ctx)
{
	memset(u, 0, sizeof(*u));
	u->irq = irq;
	u->irq_fn = irq_fn;
	u->out_fn = out_fn;
	u->ctx = ctx;
}

static void update_irq(struct linux_uart *u)
{
	int level = u->thri_pending && (u->ier & UART_IER_THRI);

	if (level != u->irq_level) {
		u->irq_level = level;
		u->irq_fn(u->ctx, u->irq, level);
	}
}

/* Loopback: DTR -> DSR, RTS -> CTS, OUT1 -> RI, OUT2 -> DCD. */
static uint8_t loopback_msr(uint8_t mcr)
{
	return (uint8_t)(((mcr & 0x02) << 3) | ((mcr & 0x01) << 5) | ((mcr & 0x04) << 4) |
			 ((mcr & 0x08) << 4));
}

static uint8_t uart_read(struct linux_uart *u, unsigned int off)
{
	bool dlab = u->lcr & UART_LCR_DLAB;
	uint8_t v;

	switch (off) {
	case UART_RX:
		return dlab ? u->dll : 0;
	case UART_IER:
		return dlab ? u->dlm : u->ier;
	case UART_IIR:
		v = (u->fcr & UART_FCR_ENABLE) ? UART_IIR_FIFO : 0;
		if (u->thri_pending && (u->ier & UART_IER_THRI)) {
			u->thri_pending = false; /* reading IIR clears THRI */
			update_irq(u);
			return v | UART_IIR_THRI;
		}
		return v | UART_IIR_NO_INT;
	case UART_LCR:
		return u->lcr;
	case UART_MCR:
		return u->mcr;
	case UART_LSR:
		return UART_LSR_THRE | UART_LSR_TEMT;
	case UART_MSR:
		/* outside loopback: carrier, data set ready and clear to send */
		return (u->mcr & UART_MCR_LOOP) ? loopback_msr(u->mcr) : 0xb0;
	default:
		return u->scr;
	}
}

static void uart_write(struct linux_uart *u, unsigned int off, uint8_t v)
{
	bool dlab = u->lcr & UART_LCR_DLAB;

	switch (off) {
	case UART_RX:
		if (dlab) {
			u->dll = v;
			return;
		}
		/* the byte leaves at once: THR is empty again, a new THRI edge */
		u->thri_pending = false;
		update_irq(u);
		if (!(u->mcr & UART_MCR_LOOP))
			u->out_fn(u->ctx, v);
		u->thri_pending = true;
		break;
	case UART_IER:
		if (dlab) {
			u->dlm = v;
			return;
		}
		/* enabling THRI with the transmitter empty raises it (as a 16550 does) */
		if ((v & UART_IER_THRI) && !(u->ier & UART_IER_THRI))
			u->thri_pending = true;
		u->ier = v & 0x0f;
		break;
	case UART_IIR:
		u->fcr = v;
		return;
	case UART_LCR:
		u->lcr = v;
		return;
	case UART_MCR:
		u->mcr = v & 0x1f;
		return;
	case UART_SCR:
		u->scr = v;
		return;
	default:
		return; /* LSR, MSR: read only */
	}
	update_irq(u);
}

void linux_uart_io(struct linux_uart *u, unsigned int off, bool write, uint8_t *val)
{
	if (write)
		uart_write(u, off & 7, *val);
	else
		*val = uart_read(u, off & 7);
}
