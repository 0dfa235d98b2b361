-- Delivery orders run the order.fulfil workflow (src/orders/fulfilment.workflow.ts): the order
-- keeps its workflow's task id, and the workflow's 'reserve' transaction writes a reservation.
ALTER TABLE "orders" ADD COLUMN "fulfilment_task_id" TEXT;

CREATE TABLE "reservations" (
    "id" SERIAL NOT NULL,
    "order_id" INTEGER NOT NULL,
    "released_at" TIMESTAMPTZ(6),
    "created_at" TIMESTAMPTZ(6) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "reservations_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "reservations_order_id_idx" ON "reservations"("order_id");

ALTER TABLE "reservations" ADD CONSTRAINT "reservations_order_id_fkey" FOREIGN KEY ("order_id") REFERENCES "orders"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
