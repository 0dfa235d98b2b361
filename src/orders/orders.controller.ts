import { BadRequestException, Body, ConflictException, Controller, Get, NotFoundException, Param, ParseIntPipe, Patch, Post } from '@nestjs/common';
import { OrdersService, type CreateOrderDto } from './orders.service';

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post()
  async create(@Body() body: Partial<CreateOrderDto>) {
    if (typeof body?.customer !== 'string' || body.customer.length === 0) throw new BadRequestException('customer is required');
    if (!Number.isInteger(body.amountCents) || (body.amountCents as number) <= 0) {
      throw new BadRequestException('amountCents must be a positive integer');
    }
    if (body.delivery !== undefined && typeof body.delivery !== 'boolean') throw new BadRequestException('delivery must be a boolean');
    return this.orders.create({ customer: body.customer, amountCents: body.amountCents as number, delivery: body.delivery });
  }

  /** The courier's report: signals the order's fulfilment workflow (delivery orders only). */
  @Post(':id/delivered')
  async delivered(@Param('id', ParseIntPipe) id: number, @Body() body: { at?: string }) {
    const at = body?.at ?? new Date().toISOString();
    if (typeof at !== 'string' || Number.isNaN(Date.parse(at))) throw new BadRequestException('at must be a date');
    const sent = await this.orders.delivered(id, { at });
    if (sent === 'not-found') throw new NotFoundException();
    if (sent === 'no-workflow') throw new ConflictException('not a delivery order');
    if (sent === 'finished') throw new ConflictException('the order is no longer waiting for delivery (refunded, or delivered already)');
    return sent;
  }

  @Patch(':id')
  async edit(@Param('id', ParseIntPipe) id: number, @Body() body: { amountCents?: number }) {
    if (!Number.isInteger(body?.amountCents) || (body.amountCents as number) <= 0) {
      throw new BadRequestException('amountCents must be a positive integer');
    }
    const order = await this.orders.edit(id, body.amountCents as number);
    if (!order) throw new ConflictException('order is paid already (or does not exist)');
    return order;
  }

  @Get(':id')
  async get(@Param('id', ParseIntPipe) id: number) {
    const order = await this.orders.find(id);
    if (!order) throw new NotFoundException();
    return order;
  }
}
