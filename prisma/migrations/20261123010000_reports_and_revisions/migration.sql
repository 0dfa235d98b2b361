-- Orders remember which revision was confirmed; an hourly report summarises recent orders.
ALTER TABLE "orders" ADD COLUMN "confirmed_revision" INTEGER;

CREATE TABLE "reports" (
    "id" SERIAL NOT NULL,
    "period_start" TIMESTAMPTZ(6) NOT NULL,
    "orders" INTEGER NOT NULL,
    "revenue_cents" BIGINT NOT NULL,
    "created_at" TIMESTAMPTZ(6) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "reports_pkey" PRIMARY KEY ("id")
);

CREATE UNIQUE INDEX "reports_period_start_key" ON "reports"("period_start");
